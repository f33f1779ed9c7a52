"""A served Hugging Face Trainer run for hf_trainer_test.mjs, started as the
demo is (--no-browser --port P): GPT-2 from a config (nothing downloaded),
2 micro-batches of 2 samples a step, 3 steps an epoch, 2 epochs, in order;
sample 6 (the second micro-batch of global step 2) makes lm_head's output
NaN. Run from tests/browser/hf_trainer.sh with tests/python on the path."""

import argparse

from hf_models import TokenData, arguments, gpt2, poison
from nansense.transformers import NansenseCallback
from transformers import Trainer

parser = argparse.ArgumentParser()
parser.add_argument("--no-browser", action="store_true")
parser.add_argument("--port", type=int, required=True)
options = parser.parse_args()

callback = NansenseCallback(port=options.port, open_browser=False)
trainer = Trainer(model=poison(gpt2(), "lm_head"),
                  args=arguments("out", gradient_accumulation_steps=2, per_device_train_batch_size=2,
                                 num_train_epochs=2, train_sampling_strategy="sequential"),
                  train_dataset=TokenData(n=12, poisoned=[6]), callbacks=[callback])
trainer.train()
