"""What each command is asked: one frozen request per command, its values already
parsed where the options are declared (tpumem/cli.py): sizes in bytes, topologies
as Topology, shares and sizes as Increase. Requests are made by keyword only and
read by field name, so no reordering of options can swap two values."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpumem.adapters import CaptureOptions
    from tpumem.commands.options import Increase
    from tpumem.tpu.topology import Topology

from tpumem.commands.options import DEFAULT_NOISE_BYTES, DEFAULT_WIDTH, Sweep


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """Where a report goes and how it looks: the format (None: from the output's
    extension, else text), the file (None: standard output), the text's width,
    and whether the file may replace one that is not a report of tpumem's."""

    fmt: str | None = None
    output: Path | None = None
    width: int | None = DEFAULT_WIDTH  # None: the terminal's (options.text_width)
    force: bool = False
    full: bool = False  # --full: the whole text report, not the answer alone

    @property
    def whole(self) -> bool:
        """Whether the text report is shown whole: asked for, or written to a file."""
        return self.full or self.output is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportRequest:
    paths: tuple[Path, ...]
    page: Page = Page()
    capacity: int | None = None  # bytes: replay the run through the allocator model
    program: str | None = None  # one compiled program in full
    tpu: tuple[Topology, ...] = ()  # compile the run's programs for these first


@dataclass(frozen=True, slots=True, kw_only=True)
class CompareRequest:
    runs: tuple[str, ...]  # traces, or scripts with their arguments to profile first
    fmt: str = "text"
    html: Path | None = None
    output_dir: Path = Path(".")  # where profiled scripts' traces go
    width: int | None = DEFAULT_WIDTH  # None: the terminal's (options.text_width)
    force: bool = False  # --html may replace a file that is not a page of tpumem's
    capacity: int | None = None
    tpu: tuple[Topology, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffRequest:
    before: Path
    after: Path
    page: Page = Page()
    noise_bytes: int = DEFAULT_NOISE_BYTES


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckRequest:
    paths: tuple[Path, ...]
    max_peak_bytes: int | None = None
    max_fragmentation: float | None = None
    capacity: int | None = None
    max_growth_bytes: int | None = None
    baseline: Path | None = None
    max_increase: Increase | None = None  # None: not given (0 where --baseline is)
    max_imbalance: Increase | None = None
    tpu: tuple[Topology, ...] = ()  # slices the run must fit, compiled by XLA:TPU
    # A run's processes judged by the summaries their recordings left (where they
    # stand for their traces), not by their traces: evidence anyone can write.
    trust_summaries: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileRequest:
    target: str | None  # the script (or, with -m, its first argument)
    args: tuple[str, ...] = ()
    module: str | None = None  # -m
    output: Path | None = None
    framework: str | None = None
    capture: CaptureOptions | None = None  # None: the adapters' defaults
    quiet: bool = False
    fmt: str = "text"
    width: int | None = DEFAULT_WIDTH  # None: the terminal's (options.text_width)
    full: bool = False  # --full: the whole report after the run
    force: bool = False
    tensorboard: Path | None = None  # also export the trace to this logdir
    tpu: tuple[Topology, ...] = ()
    follow: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportRequest:
    paths: tuple[Path, ...]
    logdir: Path
    run: str | None = None
    force: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportRequest:
    path: Path
    output: Path | None = None
    run: str | None = None
    force: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallLibtpuRequest:
    target: Path | None = None  # None: libtpu/ in tpumem's environment


@dataclass(frozen=True, slots=True, kw_only=True)
class FitRequest:
    """`tpumem fit`: the script, compiled for each slice and never run."""

    target: str  # the script (or, with module, the module's name)
    args: tuple[str, ...] = ()
    module: bool = False
    tpu: tuple[Topology, ...] = ()
    output: Path | None = None  # the trace (None: <script>.fit.tpumem here, numbered)
    force: bool = False
    width: int | None = DEFAULT_WIDTH  # None: the terminal's (options.text_width)
    quiet: bool = False
    # The script's arguments to compile at each value, every combination of them;
    # the first is the one whose largest value that fits is sought.
    sweeps: tuple[Sweep, ...] = ()
    search: bool | None = (
        None  # None: where XLA:TPU refuses; False: never; True: also where it fits
    )
    slices: int = 1  # of each slice, joined over the data-center network (multislice)
    # A sweep's directory of its points' compiles: a program a later point lowers
    # the same is not compiled again (adapters/jax/compile_cache.py).
    compile_cache: Path | None = None
    gpu: tuple[str, ...] = ()  # PyTorch on fake tensors, for these GPUs (fit_gpu.py)
    steps: int | None = None  # with gpu: the optimizer steps run (None: GPU_STEPS)
