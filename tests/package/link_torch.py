"""Gives a fresh venv the torch of the venv running this script, as symbolic
links to the installed folders of torch and every distribution it requires
(with their dist-info, so that pip sees torch installed and resolves a
wheel's requirement against it): a copy would be gigabytes. Used by
tests/package/wheel_install.sh and scripts/wheel-timing.

    .venv/bin/python tests/package/link_torch.py <fresh venv's site-packages>
"""
import importlib.metadata as md
import os
import sys

from packaging.requirements import Requirement

target = sys.argv[1]
todo, seen = [("torch", frozenset())], set()
while todo:
    name, extras = todo.pop()
    dist = md.distribution(name)
    key = (dist.metadata["Name"].lower().replace("_", "-"), extras)
    if key in seen:
        continue
    seen.add(key)
    site = str(dist.locate_file(""))
    for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
        src, dst = os.path.join(site, top), os.path.join(target, top)
        if os.path.exists(src) and not os.path.lexists(dst):
            os.symlink(src, dst)
    for req in map(Requirement, dist.requires or []):
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
            todo.append((req.name, frozenset(req.extras)))
