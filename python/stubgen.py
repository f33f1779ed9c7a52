"""Writes nansense/_nansense.pyi, the native module's type stubs, with
pybind11-stubgen (python/CMakeLists.txt runs it after the module links).

    python stubgen.py --python-dir build/python --out build/python

The module is imported from --python-dir the way a user imports it: the
package first (which imports torch and checks it), so torch's own types
(torch.Tensor) are named in the stubs. Under pip's build isolation the
interpreter's own site folders are hidden; torch is looked up there as
cmake/torch_probe.py does.
"""

import argparse
import os
import site
import sys
import sysconfig


def import_torch() -> None:
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        if os.path.isdir(path):
            site.addsitedir(path)
    import torch  # noqa: F401


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-dir", required=True, help="the folder holding the built nansense package")
    parser.add_argument("--out", required=True, help="where nansense/_nansense.pyi is written")
    options = parser.parse_args()

    import_torch()
    sys.path.insert(0, os.path.abspath(options.python_dir))
    import pybind11_stubgen

    # Stubs name only what exists: an expression pybind11 cannot render as
    # Python (a C++ default value) becomes `...` and is reported, not fatal.
    sys.argv = ["pybind11-stubgen", "nansense._nansense", "--output-dir", os.path.abspath(options.out),
                "--ignore-invalid-expressions", ".*", "--exit-code"]
    try:
        pybind11_stubgen.main()
    except SystemExit as e:
        if e.code:
            print(f"stubgen: pybind11-stubgen failed for nansense._nansense (exit {e.code})", file=sys.stderr)
            return int(e.code) if isinstance(e.code, int) else 1
    stub = os.path.join(options.out, "nansense", "_nansense.pyi")
    if not os.path.isfile(stub):
        print(f"stubgen: pybind11-stubgen wrote no {stub}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
