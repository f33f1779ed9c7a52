// The commands of probes on the paused model (controller_probes.cpp),
// declared once (commands.h says what a declaration holds).
#include "server/controller/command_parts.h"

namespace nansense::server::command_parts {

std::vector<Command> probe_commands() {
  std::vector<Command> t;
  // --- probes on the paused model (controller_probes.cpp) ---
  const Arg probe_wait =
      number_arg("timeout_seconds",
                 "How long to wait for the probe's run to finish, in seconds (0 returns at once; the run goes on).")
          .at_least(0)
          .at_most(300)
          .or_else(10);
  const std::string probe_returns =
      " Returns the probe status (as get_probe_status) once the probe ran or timeout_seconds passed. On a locked "
      "session (a shared demo) the probe is the caller's own (a browser's, an MCP session's): no other visitor sees "
      "it, and a change that would start a run is refused while too many visitors' runs are in flight.";
  t.push_back({
      .name = "get_probe_status",
      .title = "The probe's settings and last run",
      .description =
          "The probe: whether one is active, the pinned batch and where it was captured, the forward mode "
          "(unchanged, eval, train), the perturbations (input, sample, index, values), runs completed, "
          "whether a run is pending, the newest result (its run, the batch it re-ran, whether the strips show "
          "perturbed - original) or its error, and a hint. While a probe is active every picture and "
          "statistic of the snapshot shows the probe's result in place of the last captured batch. On a locked "
          "session each visitor (a browser, an MCP session) has a probe of its own, and this shows the caller's.",
      .args = {},
      .rest = Route{"GET", "/api/probe"},
      .mcp = true,
      .read_only = true,
      .reply = "ProbeStatus",
      .run = [](Controller& c, const Args&) { return json_reply(c.probes().get_probe_status()); },
  });
  t.push_back({
      .name = "pin_batch",
      .title = "Pin the current batch",
      .description = "Pin the inputs of the last captured batch: every later capture (each step, each live update, "
                     "after time travel) re-runs them, forward only, on the model as it is then, so one batch can be "
                     "watched as training moves. The loop must be paused. Probes never change training: the model's "
                     "parameters, gradients, buffers, training flags and RNG are restored bit for bit." +
                     probe_returns,
      .args = {probe_wait},
      .rest = Route{"POST", "/api/probe/pin"},
      .mcp = true,
      .read_only = false,
      // Each visitor of a locked session changes its own probes only.
      .locked = WhenLocked::kAllowed,
      .reply = "ProbeStatus",
      .run = [](Controller& c, const Args& a) { return json_reply(c.probes().pin_batch(wait_of(a))); },
  });
  t.push_back({
      .name = "unpin_batch",
      .title = "Unpin the batch",
      .description =
          "Stop re-running the pinned batch; the last captured batch is shown again unless a forward mode or "
          "perturbations keep a probe active." +
          probe_returns,
      .args = {probe_wait},
      .rest = Route{"POST", "/api/probe/unpin"},
      .mcp = true,
      .read_only = false,
      // Each visitor of a locked session changes its own probes only.
      .locked = WhenLocked::kAllowed,
      .reply = "ProbeStatus",
      .run = [](Controller& c, const Args& a) { return json_reply(c.probes().unpin_batch(wait_of(a))); },
  });
  t.push_back({
      .name = "set_probe_mode",
      .title = "Set the probe's forward mode",
      .description =
          "Re-run the batch (pinned, else the last captured) with the model in eval mode (BatchNorm's running "
          "statistics, no dropout) or train mode (batch statistics, dropout), or as training left each "
          "module (unchanged, which ends the probe unless a pin or perturbations keep it). Training's own "
          "modes are restored after each run. The loop must be paused to turn a mode on." +
          probe_returns,
      .args = {string_arg("mode", "The forward mode.").one_of({"unchanged", "eval", "train"}).mandatory(), probe_wait},
      .rest = Route{"POST", "/api/probe/mode"},
      .mcp = true,
      .read_only = false,
      // Each visitor of a locked session changes its own probes only.
      .locked = WhenLocked::kAllowed,
      .reply = "ProbeStatus",
      .run = [](Controller& c,
                const Args& a) { return json_reply(c.probes().set_probe_mode(a.string("mode"), wait_of(a))); },
  });
  t.push_back({
      .name = "add_perturbation",
      .title = "Change input values and re-run",
      .description =
          "Set input values of one sample of the batch (pinned, else the last captured) and re-run it: for "
          "an image input [N,C,H,W] the pixel at index [y, x] gets values (one per channel, or one for every "
          "channel); for [N,H,W] one value at [y, x]; for a flat input [N,F] index is [feature]. Values are "
          "in the input's own units (after normalisation). A perturbation of the same value replaces it. "
          "While any exists the layers show perturbed - original (the input shows the perturbed input). "
          "Checked against the actual input: a misfit says what fits. The loop must be paused." +
          probe_returns,
      .args = {integers_arg("index", "[y, x] of an image input, or [feature] of a flat input.")
                   .at_least(0)
                   .items(1, 2)
                   .mandatory(),
               numbers_arg("values", "The new value(s): one per channel, or one for every channel.")
                   .items(1, 4096)
                   .mandatory(),
               integer_arg("sample", "Which sample of the batch.").at_least(0).or_else(0),
               string_arg("input_name", "Which model input (get_architecture's inputs); the first when left out.")
                   .not_empty(),
               probe_wait},
      .rest = Route{"POST", "/api/probe/perturb"},
      .mcp = true,
      .read_only = false,
      // Each visitor of a locked session changes its own probes only.
      .locked = WhenLocked::kAllowed,
      .reply = "ProbeStatus",
      .run =
          [](Controller& c, const Args& a) {
            return json_reply(c.probes().add_perturbation(a.integers("index"), a.numbers("values"), a.integer("sample"),
                                                          a.optional_string("input_name"), wait_of(a)));
          },
  });
  t.push_back({
      .name = "clear_perturbations",
      .title = "Clear the perturbations",
      .description = "Remove every perturbation; the layers show the (pinned or captured) batch itself again. Returns "
                     "the probe status with cleared: how many were removed.",
      .args = {probe_wait},
      .rest = Route{"POST", "/api/probe/clear"},
      .mcp = true,
      .read_only = false,
      // Each visitor of a locked session changes its own probes only.
      .locked = WhenLocked::kAllowed,
      .reply = "ProbeStatus",
      .run = [](Controller& c, const Args& a) { return json_reply(c.probes().clear_perturbations(wait_of(a))); },
  });
  return t;
}

}  // namespace nansense::server::command_parts
