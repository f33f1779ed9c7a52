// What a traced re-run of a tripped batch (DebugSettings::rerun_to_trace)
// restores and what it repeats, in the words of the front end that runs the
// loop body: a plain loop (C++ or Python) runs its whole body again, the
// Lightning callback only training_step and its backward. The debug report,
// the banner and the NaN's log line say it.
#pragma once

#include <string>
#include <vector>

namespace nansense::numerics {

struct RerunNote {
  // One clause for the banner and the log line: what ran the batch twice.
  std::string ran_twice = "your loop body ran this batch twice";
  std::vector<std::string> restored = {"weights and buffers", "every optimizer's state",
                                       "the LR scheduler given to start()",
                                       "torch's RNG states (CPU and every CUDA device)",
                                       "scalars the first run logged with log_scalar (replaced by the second run's)"};
  // What the batch's second run repeats, with its effects (the page's "Seen
  // twice").
  std::vector<std::string> seen_twice = {
      "your loop body for that batch: its counters, prints, logs and metric accumulators see it twice",
      "a scheduler or optimizer not given to start()",
      "the first run's optimizer.step() runs with cleared gradients, so it changes nothing"};
  std::string detect = "session.rerunning (Python) / Session::rerunning() (C++) is true during the second run";
};

}  // namespace nansense::numerics
