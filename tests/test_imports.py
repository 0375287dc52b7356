"""What importing tpumem costs: no module of tpumem/ imports a framework when it is
imported (the CLI starts without one), and the runner, which lives in the user's
process, loads none of the analysis or the reports. Each in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tpumem.adapters.import_watch import FRAMEWORKS as ADAPTED
from tpumem.adapters.import_watch import KERAS_BACKENDS

PACKAGE = Path(__file__).resolve().parent.parent / "tpumem"
# Every framework tpumem has an adapter for (its registry), Keras and its backends.
FRAMEWORKS = tuple(sorted({*ADAPTED, *KERAS_BACKENDS, "keras"}))


def _modules_loaded(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_no_module_of_tpumem_imports_a_framework():
    names = sorted(
        ".".join(("tpumem", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
            ".__init__"
        )
        for path in PACKAGE.rglob("*.py")
    )
    assert "tpumem.cli" in names and "tpumem.analysis.run_figures" in names
    loaded = _modules_loaded("\n".join(f"import {name}" for name in names))
    assert [m for m in loaded if m.split(".")[0] in FRAMEWORKS] == []


def test_the_runner_loads_no_analysis_and_no_report():
    loaded = _modules_loaded(
        "import tpumem.adapters.runner\n"
        "from tpumem.adapters import get_adapter\n"
        "from tpumem.trace.writer import TraceWriter\n"
        "for name in ('jax', 'tensorflow', 'torch_xla'):\n"
        "    get_adapter(name)\n"
    )
    assert "tpumem.adapters.jax" in loaded
    assert [m for m in loaded if m.startswith(("tpumem.analysis", "tpumem.report"))] == []
    assert [m for m in loaded if m.split(".")[0] in FRAMEWORKS] == []


def test_the_capture_side_is_tpumem_adapters_by_the_file_system_alone():
    """adapters/ (the product's layout) is tpumem.adapters through the link
    tpumem/adapters, so a checkout, an install (which copies the files) and a
    static reader find the same modules under the same name, with no import hook."""
    assert (PACKAGE / "adapters").resolve() == PACKAGE.parent / "adapters"
    code = (  # -S: no site-packages, so no install or editable finder is there
        f"import importlib.util, sys; sys.path[:0] = [{str(PACKAGE.parent)!r}]\n"
        "print(importlib.util.find_spec('tpumem').submodule_search_locations[0])\n"
    )
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    found = Path(result.stdout.strip()) / "adapters" / "runner.py"
    assert found.is_file() and found.resolve() == PACKAGE.parent / "adapters" / "runner.py"


def test_every_package_is_installed():
    """A package left out of pyproject's list is missing from an install that is
    not editable (tpumem.hlo was, until a GPU machine's install said so)."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(root).parts)
        for init in (root / "tpumem").rglob("__init__.py")
    }
    assert found <= listed, sorted(found - listed)


def test_a_report_does_not_load_arrow_compute():
    """pyarrow.compute takes about 35 ms to import: more than a report of a
    100,000-event profile spends reading its trace. A report of a profile (read,
    written as a trace, read again) and of a trace reads its columns without it."""
    data = Path(__file__).resolve().parent / "data"
    for given in (data / "xplane" / "tf_cpu.xplane.pb", data / "gpu" / "known.tpumem"):
        loaded = _modules_loaded(
            "import contextlib, io, sys\n"
            "from tpumem.cli import main\n"
            f"sys.argv = ['tpumem', 'report', {str(given)!r}]\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main()\n"
            "assert 'tpumem.analysis.run_figures' in sys.modules\n"
        )
        assert "pyarrow.compute" not in loaded, given


def test_follow_boot_watches_the_frameworks_the_import_watch_does():
    """follow_boot (the standard library only, in every process of a --follow run)
    keeps its own copy of the frameworks' modules: the same as the watch's."""
    import ast

    from tpumem.adapters.import_watch import FRAMEWORKS as WATCHED

    boot = PACKAGE.parent / "adapters" / "follow_boot" / "sitecustomize.py"
    tree = ast.parse(boot.read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FRAMEWORKS"
    ]
    assert ast.literal_eval(value) == WATCHED


# What each floor may not import: data goes one way, adapter -> trace -> analysis
# -> reading (the traces a command reads, many at once) -> report/export ->
# commands and the CLI (and tpumem.track, the notebook). Beside them: the launcher
# (profile's parent side), and the modules every floor may use (errors, units,
# outputs, regular_files, progress, the TPU topologies, the HLO reader, object
# storage's client).
UPPER = (
    "tpumem.commands",
    "tpumem.cli",
    "tpumem.cli_options",
    "tpumem.tracking",
    "tpumem.notebook",
    "tpumem.launch",
)
ABOVE_ANALYSIS = ("tpumem.reading", "tpumem.report", "tpumem.export", *UPPER)
BELOW_ALL = ("tpumem.analysis", "tpumem.adapters", *ABOVE_ANALYSIS)
FLOORS = {
    "tpumem.trace": BELOW_ALL,
    "tpumem.xplane": BELOW_ALL,
    "tpumem.hlo": BELOW_ALL,
    "tpumem.units": BELOW_ALL,
    "tpumem.errors": BELOW_ALL,
    "tpumem.distinct_names": BELOW_ALL,
    "tpumem.outputs": BELOW_ALL,
    "tpumem.regular_files": BELOW_ALL,
    "tpumem.progress": BELOW_ALL,
    "tpumem.tpu.topology": BELOW_ALL,
    "tpumem.storage": BELOW_ALL,  # (object storage's client: its callers say what it moves)
    # (the compile for --tpu reads a trace, finds its programs' peaks and writes
    # what XLA:TPU said into it: a floor of the commands' reading)
    "tpumem.tpu": ("tpumem.report", "tpumem.export", *UPPER),
    "tpumem.importer": ("tpumem.analysis", *ABOVE_ANALYSIS),
    "tpumem.snapshots": ("tpumem.analysis", *ABOVE_ANALYSIS),
    "tpumem.adapters": ("tpumem.analysis", *ABOVE_ANALYSIS),
    # (the analysis reads no file and starts no process: what it is given, it reads)
    "tpumem.analysis": (
        *ABOVE_ANALYSIS,
        "tpumem.adapters",  # (the frameworks' facts come in the trace's metadata)
        "tpumem.trace.reader",
        "concurrent",
        "multiprocessing",
    ),
    "tpumem.reading": ("tpumem.report", "tpumem.export", *UPPER),
    "tpumem.report": ("tpumem.reading", *UPPER),
    "tpumem.export": ("tpumem.reading", *UPPER),
    "tpumem.launch": ("tpumem.analysis", *ABOVE_ANALYSIS[:-1]),
}
# The commands: each is one module, which imports no other (what two of them
# share lives in a module of its own beside them).
COMMANDS = (
    "check",
    "compare",
    "diff",
    "export",
    "fit",
    "import_",
    "install_libtpu",
    "profile",
    "report",
    "watch",
)
ROOTS = ((PACKAGE, ("tpumem",)), (PACKAGE.parent / "adapters", ("tpumem", "adapters")))


def _sources() -> list[tuple[str, Path]]:
    """Every module of tpumem with its file (tpumem/adapters is a link to
    adapters/, which rglob does not follow)."""
    found = []
    for root, prefix in ROOTS:
        for path in sorted(root.rglob("*.py")):
            module = ".".join((*prefix, *path.relative_to(root).with_suffix("").parts))
            found.append((module.removesuffix(".__init__"), path))
    assert any(module.startswith("tpumem.adapters.") for module, _ in found)
    return found


def _imported(module: str, path: Path) -> set[str]:
    """What the module imports, read from its source (inside functions too): each
    name as a module would be (`from tpumem import cli`: tpumem.cli), relative
    imports made absolute."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(p for p in (*parts, base) if p)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_the_floors_import_downwards_only():
    """No module imports a module of a floor above its own."""
    found = []
    for module, path in _sources():
        banned = next(
            (b for floor, b in FLOORS.items() if f"{module}.".startswith(f"{floor}.")), ()
        )
        prefixes = tuple(f"{b}." for b in banned)
        found += [(module, n) for n in _imported(module, path) if f"{n}.".startswith(prefixes)]
    assert found == []


def test_the_import_reader_sees_every_form():
    """The reader above, on the forms an import takes (a test of the test)."""
    source = PACKAGE / "commands" / "report.py"
    names = _imported("tpumem.commands.report", source)
    assert {"tpumem.reading.paths", "tpumem.reading.paths.opened_run"} <= names
    assert "tpumem.report" in names  # (inside the function)


def test_the_launcher_takes_from_the_adapters_their_registry_and_protocol_alone():
    """`tpumem profile`'s side knows the profiled process's modules through these:
    the registry (which frameworks there are), the protocol both sides speak, the
    header a trace starts with, and where XLA dumps its programs."""
    allowed = {
        "tpumem.adapters",
        "tpumem.adapters.launch_protocol",
        "tpumem.adapters.run_header",
        "tpumem.adapters.xla_dump",
    }
    found = set()
    for module, path in _sources():
        if module.startswith("tpumem.launch."):
            found |= {
                n.rpartition(".")[0] if n.rpartition(".")[0] in allowed else n
                for n in _imported(module, path)
                if n.startswith("tpumem.adapters")
            }
    assert found <= allowed, sorted(found - allowed)


def test_no_command_imports_another():
    commands = {f"tpumem.commands.{name}" for name in COMMANDS}
    found = []
    for module, path in _sources():
        if module in commands:
            others = commands - {module}
            found += [(module, n) for n in _imported(module, path) if n in others]
    assert found == []
    assert {p.stem for p in (PACKAGE / "commands").glob("*.py")} >= set(COMMANDS)
