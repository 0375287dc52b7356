"""A script's uncaught exception is printed as `python script.py` prints it: an
interrupt that lands inside one of tpumem's hooks (Ctrl-C in a JAX loop, while
a jitted call goes through tpumem's wrapper) shows no frame of tpumem's, so that
it does not read as tpumem's crash."""

from __future__ import annotations

import traceback

from tpumem.adapters import script_target


def test_the_hooks_frames_are_left_out_of_the_scripts_traceback():
    hook_file = script_target.PROFILER_PLACES[0] + "adapters/jax/a_hook.py"
    namespace: dict = {}
    exec(compile("def hook(call):\n    return call()\n", hook_file, "exec"), namespace)

    def framework_call():
        raise KeyboardInterrupt

    try:
        namespace["hook"](framework_call)  # the user's line, through tpumem's hook
    except KeyboardInterrupt as error:
        caught = error
    files = [frame.filename for frame in traceback.extract_tb(caught.__traceback__)]
    assert hook_file in files  # (as Python keeps it)
    shown = traceback.extract_tb(script_target.user_traceback(caught))
    assert [frame.name for frame in shown] == [
        "test_the_hooks_frames_are_left_out_of_the_scripts_traceback",
        "framework_call",
    ]
