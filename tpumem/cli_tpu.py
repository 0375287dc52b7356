"""The options of the TPU slice commands (`fit`, `install-libtpu`), registered on
the command line by cli.py, and the call to what each does (tpumem/commands/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tpumem.cli_options import Force, Module, Script, ScriptArgs, Tpu, Width
from tpumem.commands import options
from tpumem.commands.options import DEFAULT_WIDTH, Sweep


def fit(
    target: Script = None,
    args: ScriptArgs = None,
    module: Module = None,
    tpu: Tpu = None,
    output: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Trace file (default: <script>.fit.tpumem here, numbered if taken).",
        ),
    ] = None,
    force: Force = False,
    sweep: Annotated[
        Optional[list[Sweep]],  # noqa: UP045
        typer.Option(
            metavar="NAME=V1,V2,...",
            parser=options.sweep,
            help="Compile the script at each value of its argument --NAME (batch=8,16,32) "
            "and give the largest that fits each slice (with --gpu: each GPU, one --sweep); "
            "a trace each. Repeat for several "
            "(--sweep batch=8,16,32 --sweep remat=none,full): every combination, and the "
            "first's largest that fits for each of the others' (a value above one that did "
            "not fit is not compiled).",
            show_default=False,
        ),
    ] = None,
    search: Annotated[
        Optional[bool],  # noqa: UP045
        typer.Option(
            "--search/--no-search",
            help="Where XLA:TPU refuses a program, compile it again with the changes that "
            "shrink it (donation, the state sharded over the chips, the scan's steps "
            "recomputed, bfloat16 state, half the batch) until one fits: done by default. "
            "--search also where it fits: the batch doubled until XLA:TPU refuses, the "
            "largest that fits. --no-search: the verdict alone.",
            show_default=False,
        ),
    ] = None,
    slices: Annotated[
        int,
        typer.Option(
            metavar="N",
            min=1,
            max=64,
            help="N slices of each --tpu, as a multislice job has them: jax.devices() "
            "holds all of their chips (each with its slice_index).",
        ),
    ] = 1,
    gpu: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            metavar="GPU",
            help="A PyTorch script: will it fit on this GPU (H100-80GB, H200, A100-40GB, "
            "A100-80GB; repeatable)? Its steps run on fake tensors: nothing computed, no "
            "GPU needed.",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            metavar="N",
            min=1,
            max=100,
            help="With --gpu: the optimizer steps run before the script is stopped (from "
            "the second on, a step's memory repeats).  [default: 3]",
            show_default=False,
        ),
    ] = None,
    width: Width = DEFAULT_WIDTH,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress lines.")] = False,
) -> None:
    """Will the script's model fit on each TPU slice (--tpu v5e-8, repeatable), or
    on a GPU (--gpu H100-80GB)? For a TPU the script sees the slice's devices; each
    jitted call is compiled for them by XLA:TPU, on this machine, and returns
    shaped stand-ins instead of running (needs libtpu: tpumem install-libtpu). For
    a GPU, a PyTorch script's tensors are fake: each op's memory is exact, none
    is allocated, and PyTorch's caching allocator is modeled. Nothing is computed
    and no device is needed. Exit status 1 where it does not fit."""
    from tpumem.commands.fit import run_fit
    from tpumem.commands.requests import FitRequest
    from tpumem.errors import TpumemError

    if (target is None) == (module is None):
        raise TpumemError("fit: give a script, or -m and a module")
    request = FitRequest(
        target=module or target or "",
        args=tuple(([target] if module and target else []) + list(args or [])),
        module=module is not None,
        tpu=tuple(tpu or ()),
        output=output,
        force=force,
        width=width,
        quiet=quiet,
        sweeps=tuple(sweep or ()),
        search=search,
        slices=slices,
        gpu=tuple(gpu or ()),
        steps=steps,
    )
    raise typer.Exit(run_fit(request))


def install_libtpu(
    target: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--target",
            metavar="DIR",
            help="Where to put it (default: libtpu/ in tpumem's environment).",
        ),
    ] = None,
) -> None:
    """Install libtpu (XLA:TPU, about 700 MB; the release the installed JAX names)
    where only tpumem's compile for --tpu looks: not in site-packages, where every
    `import jax` would load it and, without a TPU, print start-up errors."""
    from tpumem.commands.install_libtpu import run_install_libtpu
    from tpumem.commands.requests import InstallLibtpuRequest

    raise typer.Exit(run_install_libtpu(InstallLibtpuRequest(target=target)))
