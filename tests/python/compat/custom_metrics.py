"""Custom instruments in the reference's decorator form: a scalar metric per
collected layer, an activation-shaped tensor and a weight-shaped one."""

import torch
import torch.nn.functional as F

import nansense
from common import arguments, loaders, make_model, report

args = arguments()
torch.manual_seed(0)
model = make_model()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
train_loader, val_loader = loaders()
session = nansense.start(model, optimizer=optimizer, port=args.port, open_browser=False)


@session.watch_metric("sparsity")
def sparsity(ctx: nansense.LayerContext) -> float:
    return (ctx.activation > 0).float().mean().item()


@session.watch_metric("spread", on="epoch", reduce="max")
def spread(ctx: nansense.LayerContext):
    return {"std": ctx.activation.std().item(), "range": (ctx.activation.max() - ctx.activation.min()).item()}


@session.watch_layer_tensor("zscore")
def zscore(ctx: nansense.LayerContext) -> torch.Tensor:
    a = ctx.activation
    return (a - a.mean()) / (a.std() + 1e-6)


@session.watch_weight_tensor("adam_update")
def adam_update(ctx: nansense.WeightContext):
    if "exp_avg" not in ctx.optimizer_state:
        return None
    return ctx.optimizer_state["exp_avg"] / (ctx.optimizer_state["exp_avg_sq"].sqrt() + 1e-8)


session.watch("1")  # the watched layers collect (StatsScope.WATCHED, the default)
session.watch("3")
for epoch in session.epochs(2):
    with session.restore_point():
        if epoch == 1:
            session.request_snapshot()  # the next batch publishes (and its tensor instruments run)
        for inputs, targets in session.batches(train_loader, phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(inputs), targets).backward()
            optimizer.step()
        with torch.no_grad():
            for inputs, _ in session.batches(val_loader, phase="val"):
                model(inputs)
session.close()

metrics = session.watch_metrics_snapshot()
plots = metrics.plots("1", "train")
snapshot = session.snapshot
report("custom_metrics", errors=session.instrument_errors,
       sparsity_points=len(plots["sparsity"][""].values) if "sparsity" in plots else 0,
       sparsity_in_range=all(0.0 <= v <= 1.0 for v in plots["sparsity"][""].values) if "sparsity" in plots else False,
       spread_series=sorted(plots.get("spread", {})),
       spread_epochs=list(plots["spread"]["std"].epochs) if "spread" in plots else [],
       zscore_layers=sorted(snapshot.custom_activations) if snapshot else [],
       adam_update_params=sorted(snapshot.custom_weight_tensors) if snapshot else [],
       pause_count=session.pause_count, closed=session.closed)
