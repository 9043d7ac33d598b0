#!/usr/bin/env python3
"""The device kit's wheels: what the H200 lacks for diffusers and AIPerf (docs/DEVICE-KIT.md).

  wheels.py lock   resolve ROOTS for CPython 3.12 manylinux x86_64 (pip's dry-run report,
                   metadata only), keep what the device lacks, write wheels.txt
  wheels.py check  DIR: every Requires-Dist of every wheel in DIR (markers evaluated for the
                   device's Python) is met by a wheel in DIR or a package on the device
  wheels.py prune  SITE: remove the distributions in unused.txt from the installed tree SITE
  wheels.py blocker WHL DIR: write DIR/sitecustomize.py, which fails every import of a module
                   those distributions' wheels in WHL install, and logs it to DIR/attempts.log

The device has no network and installs the kit with `pip install --no-index --no-deps`, so
nothing checks dependencies there: `check` is that check, made here. Reads only this folder's
device-packages.txt, wheels.txt and unused.txt, never anything outside the repository.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser

try:
    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:  # pip always vendors it
    from pip._vendor.packaging.markers import Marker
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version

HERE = os.path.dirname(os.path.abspath(__file__))
ROOTS = ["diffusers==0.42.1", "aiperf==0.13.0"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64"]
# The device's interpreter: /opt/torch/.venv/bin/python3, Python 3.12.3 on Linux x86_64.
ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "os_name": "posix",
       "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
       "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "implementation_version": "3.12.3", "platform_release": "", "platform_version": ""}


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def device_packages():
    """{normalized name: version or None} from device-packages.txt."""
    out = {}
    with open(os.path.join(HERE, "device-packages.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line:
                out[norm(line[0])] = line[1] if len(line) > 1 else None
    return out


def applies(req, extras):
    """Whether requirement req holds for the device's Python when these extras are asked for."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate(dict(ENV, extra=e)) for e in [""] + sorted(extras))


def lock():
    device = device_packages()
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed",
               "--report", report, "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", "--target", os.path.join(tmp, "t")]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        subprocess.run(cmd + ROOTS, check=True)
        with open(report) as f:
            items = json.load(f)["install"]
    dists = {norm(i["metadata"]["name"]): i for i in items}
    # Walk from the roots; stop at what the device has (its own dependencies are its business).
    keep, extras, todo = {}, {}, [Requirement(r) for r in ROOTS]
    while todo:
        req = todo.pop()
        n = norm(req.name)
        if n in device:
            # The device has n, but an extra asked of it (markdown-it-py[linkify]) may add
            # packages it lacks: take those, as the resolution's n declares them.
            for r in dists[n]["metadata"].get("requires_dist") or [] if req.extras else []:
                r = Requirement(r)
                if applies(r, req.extras) and not applies(r, ()):
                    todo.append(r)
            continue
        new = set(req.extras) - extras.get(n, set())
        if n in keep and not new:
            continue
        extras.setdefault(n, set()).update(req.extras)
        keep[n] = dists[n]
        for r in dists[n]["metadata"].get("requires_dist") or []:
            r = Requirement(r)
            if applies(r, extras[n]):
                todo.append(r)
    lines = [
        "# The device kit's wheels, written by `python3 scripts/gpu-kit/wheels.py lock` (do not edit",
        "# by hand): the resolution of " + " + ".join(ROOTS) + " for CPython 3.12 manylinux",
        "# x86_64, less every package on the device (device-packages.txt) and what only those need.",
        "# build.sh downloads exactly these with --no-deps --require-hashes.",
    ]
    for n in sorted(keep):
        i = keep[n]
        url = i["download_info"]["url"]
        sha = i["download_info"]["archive_info"]["hashes"]["sha256"]
        lines.append(f"{i['metadata']['name']}=={i['metadata']['version']} --hash=sha256:{sha}"
                     f"  # {url.rsplit('/', 1)[1]}")
    with open(os.path.join(HERE, "wheels.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wheels.txt: {len(keep)} wheels", file=sys.stderr)


def dist_info_file(z, name):
    """(the .dist-info folder, the text of its file name) of wheel z."""
    member = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/" + name))
    return member.split("/")[0], z.read(member).decode("utf-8")


def wheel_metadata(path):
    with zipfile.ZipFile(path) as z:
        return Parser().parsestr(dist_info_file(z, "METADATA")[1])


def check(whl_dir):
    device = device_packages()
    kit = {}
    for fn in sorted(os.listdir(whl_dir)):
        if fn.endswith(".whl"):
            m = wheel_metadata(os.path.join(whl_dir, fn))
            kit[norm(m["Name"])] = (Version(m["Version"]), m, fn)
    errors, unknown, notes = [], set(), []
    for root in ROOTS:
        r = Requirement(root)
        if norm(r.name) not in kit or kit[norm(r.name)][0] not in r.specifier:
            errors.append(f"{root} is not in the kit")
    for n in kit:
        if n in device:
            errors.append(f"{kit[n][2]} shadows the device's {n} (the kit is what the device lacks)")
    # Extras asked of kit wheels by other kit wheels (uvicorn[standard]); grow until fixed.
    extras = {n: set() for n in kit}
    changed = True
    while changed:
        changed = False
        for n, (ver, meta, fn) in kit.items():
            for r in map(Requirement, meta.get_all("Requires-Dist") or []):
                d = norm(r.name)
                if d in kit and applies(r, extras[n]) and not set(r.extras) <= extras[d]:
                    extras[d] |= set(r.extras)
                    changed = True
    for n, (ver, meta, fn) in sorted(kit.items()):
        rp = meta.get("Requires-Python")
        if rp and Version(ENV["python_full_version"]) not in Requirement("x" + rp).specifier:
            errors.append(f"{fn}: Requires-Python {rp} excludes Python {ENV['python_full_version']}")
        for r in map(Requirement, meta.get_all("Requires-Dist") or []):
            if not applies(r, extras[n]):
                continue
            d = norm(r.name)
            if d in kit:
                if not r.specifier.contains(kit[d][0], prereleases=True):
                    errors.append(f"{fn} needs {r}; the kit has {d} {kit[d][0]}")
            elif d in device:
                if device[d] is None:
                    unknown.add(d)
                elif not r.specifier.contains(Version(device[d]), prereleases=True):
                    errors.append(f"{fn} needs {r}; the device has {d} {device[d]}")
                if r.extras:
                    notes.append(f"{fn} needs {r}: `wheels.py lock` took that extra's packages "
                                 "from the resolution; not checked here")
            else:
                errors.append(f"{fn} needs {r}: neither in the kit nor on the device")
    for line in notes:
        print("note:", line, file=sys.stderr)
    print(f"wheel check: {len(kit)} kit wheels; every Requires-Dist met by the kit or the device"
          if not errors else f"wheel check: {len(errors)} unmet", file=sys.stderr)
    if unknown:
        print(f"  met by name only (device version not recorded): {', '.join(sorted(unknown))}",
              file=sys.stderr)
    for e in errors:
        print("  MISSING:", e, file=sys.stderr)
    return 1 if errors else 0


def unused_names():
    with open(os.path.join(HERE, "unused.txt")) as f:
        return {norm(line.split("#", 1)[0].strip()) for line in f} - {""}


def record_paths(lines):
    # --target puts data files (../../share/...) beside the packages.
    return [row.rsplit(",", 2)[0].removeprefix("../../") for row in lines if row.strip()]


def unused_records(names_and_records):
    """{distribution: [paths]} for unused.txt's distributions among (dist-info name, RECORD lines)."""
    def dist(info):  # "name-version.dist-info"
        return norm(info.removesuffix(".dist-info").rsplit("-", 1)[0])
    names, out = unused_names(), {}
    for info, lines in names_and_records:
        if dist(info) in names:
            out[info] = record_paths(lines)
    missing = names - {dist(d) for d in out}
    if missing:
        sys.exit(f"unused.txt names distributions not in the kit: {', '.join(sorted(missing))}")
    return out


def unused_files(site):
    """unused_records of the tree pip installed in site."""
    def installed():
        for d in sorted(os.listdir(site)):
            if d.endswith(".dist-info"):
                with open(os.path.join(site, d, "RECORD")) as f:
                    yield d, f.read().splitlines()
    return unused_records(installed())


def prune(site):
    removed = 0
    for paths in unused_files(site).values():
        for p in paths:
            full = os.path.join(site, p)
            if os.path.isfile(full):
                removed += os.path.getsize(full)
                os.remove(full)
    for root, dirs, files in os.walk(site, topdown=False):
        if root != site and not os.listdir(root):
            os.rmdir(root)
    print(f"pruned unused.txt's distributions: {removed / 1048576:.1f} MiB", file=sys.stderr)


def blocker(whl_dir, out):
    def wheels():
        for fn in sorted(os.listdir(whl_dir)):
            if fn.endswith(".whl"):
                with zipfile.ZipFile(os.path.join(whl_dir, fn)) as z:
                    info, record = dist_info_file(z, "RECORD")
                    yield info, record.splitlines()
    tops = set()
    for paths in unused_records(wheels()).values():
        for p in paths:
            top = p.split("/", 1)[0]
            if p.endswith(".py") and not top.endswith((".dist-info", ".data")):
                tops.add(top.removesuffix(".py"))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "sitecustomize.py"), "w") as f:
        f.write(f"""# Written by scripts/gpu-kit/wheels.py blocker: fail and log every import of these.
import os, sys
BLOCKED = {sorted(tops)!r}
LOG = {os.path.join(os.path.abspath(out), "attempts.log")!r}


class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            with open(LOG, "a") as f:
                f.write("%d %s\\n" % (os.getpid(), name))
            raise ImportError("blocked by the gpu-kit check: " + name)
        return None


sys.meta_path.insert(0, Block())
""")
    print(f"blocking {len(tops)} modules: {' '.join(sorted(tops))}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:] == ["lock"]:
        lock()
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "prune":
        prune(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "blocker":
        blocker(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
