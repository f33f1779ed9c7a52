"""Peak memory of a paused batch, against the same loop with nansense disabled.

Each configuration runs in a child process of its own (peak resident memory,
VmHWM, is per process and only grows), measured in the same invocation:

  disabled  nansense.start(model, enabled=False): the plain loop
  running   nansense on, the UI served, never paused (the guard on every batch)
  paused    nansense on, paused at the first batch: that batch is captured
            (activations, gradients, statistics) and a page's first requests
            are made (the snapshot summary, a strip); then the run resumes

Every configuration trains the same batches. Prints each peak, the paused
run's ratio to the disabled one (the target is <= 1.3), what the snapshot
kept, and the time from the pause to the first strip a page gets.

  .venv/bin/python bench/python/pause_memory.py                 # ResNet-18 160^2 x 32
  .venv/bin/python bench/python/pause_memory.py --model resnet50 --image 224 --batch 64
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

CONFIGS = ("disabled", "running", "paused")


def peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=600) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"GET {url}: HTTP {e.code}: {e.read()[:500]!r}") from None


def child(args) -> dict:
    import torch
    import torchvision

    import nansense

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = [(torch.randn(args.batch, 3, args.image, args.image), torch.randint(0, 10, (args.batch,)))
            for _ in range(args.batches)]
    enabled = args.child != "disabled"
    session = nansense.start(model, optimizer=optimizer, enabled=enabled, port=0 if enabled else None,
                             open_browser=False)
    result: dict = {"config": args.child}
    if args.child == "paused":
        session.pause()
    elif enabled:
        session.run()  # a served session otherwise pauses at its first batch
    steps: list[float] = []

    def loop():
        for x, y in session.batches(data, phase="train"):
            t = time.perf_counter()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            steps.append(time.perf_counter() - t)

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        if args.child == "paused":
            measure_pause(session, result)
            session.run()
    except BaseException:
        session.detach()  # a failed measurement must not leave the loop paused
        raise
    finally:
        thread.join()
    session.close()
    result["peak_mib"] = peak_mib()
    result["step_ms"] = sorted(steps)[len(steps) // 2] * 1000 if steps else None
    return result


def measure_pause(session, result: dict) -> None:
    import nansense

    state = session.wait_until_stopped(timeout=1800)
    paused = time.perf_counter()
    if str(state) != str(nansense.RunState.PAUSED):
        raise RuntimeError(f"the loop did not pause at its first batch: {state}")
    url = session.url.rstrip("/")
    status, body = get(url + "/api/snapshot")
    summary = json.loads(body)
    first = session.layer_names[0]
    status, png = get(f"{url}/api/render/strip?layer={first}&kind=activation&sample=0")
    result["first_strip_ms"] = (time.perf_counter() - paused) * 1000
    result["strip_ok"] = status == 200 and png[:8] == b"\x89PNG\r\n\x1a\n"
    result["samples_kept"] = summary.get("samples_kept")
    result["batch_size"] = summary.get("batch_size")
    result["held_mib"] = summary["budget"]["held_bytes"] / (1 << 20)
    result["full_mib"] = summary["budget"]["full_bytes"] / (1 << 20)
    result["budget_mib"] = summary["budget"]["budget_bytes"] / (1 << 20)
    result["snapshot_layers"] = len(summary["layers"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", help="a torchvision.models constructor (random weights)")
    parser.add_argument("--image", type=int, default=160)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=3, help="batches each configuration trains")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0

    print(f"{args.model}, batch {args.batch} x 3 x {args.image} x {args.image}, {args.batches} batches, "
          f"{args.threads} torch threads", flush=True)
    results = {}
    for config in CONFIGS:
        command = [sys.executable, __file__, "--child", config, "--model", args.model, "--image", str(args.image),
                   "--batch", str(args.batch), "--batches", str(args.batches), "--threads", str(args.threads)]
        out = subprocess.run(command, capture_output=True, text=True, env=os.environ)
        if out.returncode != 0:
            print(f"{config}: failed\n{out.stderr[-3000:]}")
            return 1
        results[config] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[config]
        print(f"{config:9s} peak {r['peak_mib']:7.0f} MiB   median step {r['step_ms']:7.0f} ms", flush=True)
    base = results["disabled"]["peak_mib"]
    paused = results["paused"]
    print(f"running / disabled peak: {results['running']['peak_mib'] / base:.2f}x")
    print(f"paused  / disabled peak: {paused['peak_mib'] / base:.2f}x   (target <= 1.30)")
    print(f"paused snapshot: {paused['samples_kept']} of {paused['batch_size']} samples kept, held "
          f"{paused['held_mib']:.0f} MiB (every sample: {paused['full_mib']:.0f} MiB; budget "
          f"{paused['budget_mib']:.0f} MiB), "
          f"{paused['snapshot_layers']} layers")
    print(f"pause -> first strip: {paused['first_strip_ms']:.0f} ms ({'PNG' if paused['strip_ok'] else 'FAILED'})")
    return 0 if paused["strip_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
