"""What the Python examples share: their command-line flags and the end of a
run (the UI stays up for post-mortem browsing unless --exit-when-done)."""

import argparse
import threading
from pathlib import Path
from typing import Optional


def arguments(doc: str, *, data_dir: Optional[Path] = None, data_help: str = "", epochs: int = 3,
              batch_size: int = 64) -> argparse.ArgumentParser:
    """The examples' flags (an example adds its own after these); --data-dir
    when data_dir is given."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8080, help="UI port (0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="UI bind address")
    p.add_argument("--no-ui", action="store_true",
                   help="serve no UI: train without pausing, a NaN is still caught and written to a capsule")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    p.add_argument("--detach", action="store_true", help="train without pausing (the UI stays live)")
    p.add_argument("--limit-batches", type=int, default=0, help="cap batches per phase (0 = all)")
    if data_dir is not None:
        p.add_argument("--data-dir", type=Path, default=data_dir, help=data_help)
    p.add_argument("--exit-when-done", action="store_true", help="exit after training instead of keeping the UI up")
    p.add_argument("--disabled", action="store_true", help="nansense off (enabled=False): a plain loop")
    return p


def port(args: argparse.Namespace) -> Optional[int]:
    """The port to serve on, None for --no-ui."""
    return None if args.no_ui else args.port


def keep_serving(url: Optional[str], args: argparse.Namespace) -> None:
    """After training: keep the UI up until Ctrl-C (unless --exit-when-done
    or nothing is served)."""
    if url and not args.exit_when_done:
        print(f"training finished; the UI stays up at {url} (Ctrl-C to exit)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
