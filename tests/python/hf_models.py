"""Tiny Hugging Face models built from their configs (random weights,
nothing downloaded), random token data, and a NaN that one token makes."""

import os

os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

POISON = 99  # a sample holding this token makes the poisoned layer's output NaN


class TokenData(torch.utils.data.Dataset):
    """n samples of `length` random token ids in 1..98; the samples in
    `poisoned` carry POISON. kind: "causal" (labels = input_ids), "classify"
    (a class label) or "seq2seq" (labels: another id sequence)."""

    def __init__(self, n=16, length=8, kind="causal", poisoned=(), seed=0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, POISON - 1, (n, length), generator=g)
        for i in poisoned:
            self.ids[i, 2] = POISON
        self.targets = torch.randint(1, POISON - 1, (n, length), generator=g)
        self.classes = torch.randint(0, 2, (n,), generator=g)
        self.kind = kind

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        item = {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i])}
        if self.kind == "causal":
            item["labels"] = self.ids[i]
        elif self.kind == "classify":
            item["labels"] = self.classes[i]
        else:
            item["labels"] = self.targets[i]
        return item


def poison(model, layer):
    """Make `layer`'s output NaN (through a 0/0, aten::div) on a forward whose
    input_ids hold POISON: data-dependent, so a replay trips again."""
    seen = {"poisoned": False}

    def look(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        seen["poisoned"] = bool(ids is not None and (ids == POISON).any())

    def spoil(module, args, output):
        if seen["poisoned"]:
            zero = output.new_zeros(())
            return output * (zero / zero)
        return None

    model.register_forward_pre_hook(look, with_kwargs=True)
    model.get_submodule(layer).register_forward_hook(spoil)
    return model


def gpt2(**config):
    from transformers import GPT2Config, GPT2LMHeadModel
    options = dict(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0)
    options.update(config)
    return GPT2LMHeadModel(GPT2Config(**options))


def bert():
    from transformers import BertConfig, BertForSequenceClassification
    return BertForSequenceClassification(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=64,
                                                    max_position_embeddings=32, num_labels=2))


def t5():
    from transformers import T5Config, T5ForConditionalGeneration
    return T5ForConditionalGeneration(T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                                               num_decoder_layers=2, num_heads=2, decoder_start_token_id=0,
                                               pad_token_id=0, eos_token_id=1))


def arguments(out, **kwargs):
    from transformers import TrainingArguments
    options = dict(output_dir=str(out), per_device_train_batch_size=4, gradient_accumulation_steps=1,
                   num_train_epochs=1, learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[],
                   use_cpu=True, disable_tqdm=True, seed=0, dataloader_num_workers=0)
    options.update(kwargs)
    return TrainingArguments(**options)
