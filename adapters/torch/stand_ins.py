"""What a fake tensor's value reads as in `tpumem fit --gpu`'s run, where the
script asks for one (`loss.item()`, `if torch.isnan(loss)`, a GradScaler's
check for infinities): fake tensors have shapes, not values, so the script gets
a stand-in, and what it prints is not the model's.

- A value made by a factory (`torch.tensor(0.0)`, `torch.full((), 0.0)`,
  `zeros`, `ones`) and carried by arithmetic with numbers and other such
  values, of a one-element tensor, is known: an optimizer's step count counts,
  a GradScaler's `found_inf` stays 0, so the optimizer steps as on a GPU that
  found none.
- A truth made by a factory (`torch.tensor(True)`) is its value; any other is
  the one a healthy step has: values equal themselves and are not infinite
  (`isnan`, `isinf` and `isfinite` come as eq and ne with the tensor itself or
  with inf), equalities and `<=`, `>=` hold, `<` and `>` do not (a loss above
  a bound, below the best so far: neither); it follows through the ops that
  combine truths.
- Any other number is 1 (a count divides: never 0).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

TRUE_OPS = frozenset(("le", "ge", "isfinite", "isclose", "equal"))
NOT_OPS = frozenset(("logical_not", "bitwise_not"))
AND_OPS = frozenset(("mul", "logical_and", "bitwise_and", "minimum", "all"))
OR_OPS = frozenset(("add", "logical_or", "bitwise_or", "maximum", "any"))
# Ops whose output holds their first input's value, of a one-element tensor.
SAME = frozenset(
    (
        "lift_fresh",
        "lift_fresh_copy",
        "_to_copy",
        "clone",
        "detach",
        "alias",
        "view",
        "_unsafe_view",
        "reshape",
        "squeeze",
        "unsqueeze",
        "expand",
        "sum",
        "mean",
        "max",
        "min",
        "amax",
        "amin",
    )
)
ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "pow": operator.pow,
}
# What checks a step for faults (a GradScaler's): a healthy step finds none, so
# the flags it writes keep their value (0: no infinities).
FAULT_CHECKS = frozenset(("_amp_foreach_non_finite_check_and_unscale",))
FILLS = {"zeros": 0.0, "zeros_like": 0.0, "new_zeros": 0.0, "zero": 0.0, "ones": 1.0}
FILLS |= {"ones_like": 1.0, "new_ones": 1.0}


class StandIns:
    def __init__(self, torch: Any) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self.torch = torch
        self._truths: Any = WeakIdKeyDictionary()  # a bool tensor -> its truth
        self._values: Any = WeakIdKeyDictionary()  # a one-element tensor -> its value
        self.asked = 0  # values the script asked for

    def after(self, func: Any, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        """What the op's output holds, where it is known; what it wrote in place
        and is not followed, unknown again."""
        torch = self.torch
        if name.endswith("_") and not name.endswith("__"):  # (in place: add_ is add)
            name = name[:-1]
        if name in FAULT_CHECKS:
            return
        if name.startswith("_foreach_") and name[9:] in ARITHMETIC and args:
            self._each(ARITHMETIC[name[9:]], args, kwargs)
            return
        if not isinstance(out, torch.Tensor):
            self._forget_written(func, args)
            return
        value = self._value(name, args, kwargs, out) if out.numel() == 1 else None
        if out.dtype == torch.bool:  # (a truth a factory made is that value)
            self._truths[out] = bool(value) if value is not None else self._truth(name, args)
        elif value is not None:
            self._values[out] = value
        else:
            self._values.pop(out, None)  # (an in-place op on it that is not followed)

    def _value(self, name: str, args: tuple, kwargs: dict, out: Any) -> float | None:
        values = [self._of(a) for a in args]
        if name in FILLS:
            return FILLS[name]
        if name in ("full", "full_like", "fill", "new_full"):
            return _number(args[-1] if name != "new_full" else args[2] if len(args) > 2 else None)
        if name == "scalar_tensor":
            return _number(args[0])
        if name in ("lift_fresh", "lift_fresh_copy") and args:
            constant = getattr(out, "constant", None)
            return self._real(constant) if constant is not None else None
        if name == "copy":  # copy_(self, source)
            return values[1] if len(values) > 1 else None
        if name in SAME:
            return values[0] if values else None
        operation = ARITHMETIC.get(name)
        first, second = [*values, None, None][:2]
        if operation is None or first is None or second is None:
            return None
        alpha = _number(kwargs.get("alpha", 1))
        if name in ("add", "sub"):
            second *= 1.0 if alpha is None else alpha
        try:
            return operation(first, second)
        except (ArithmeticError, ValueError, TypeError):
            return None

    def _each(self, operation: Callable[[float, float], float], args: tuple, kwargs: dict) -> None:
        """A foreach op on a list of tensors: each one's value, where the other
        operand is known, a number, a tensor or a list of them (an optimizer's
        step counts, each one more)."""
        tensors = args[0] if isinstance(args[0], list | tuple) else ()
        others = args[1] if len(args) > 1 else None
        if not isinstance(others, list | tuple):
            others = [others] * len(tensors)
        alpha = _number(kwargs.get("alpha", 1))
        alpha = 1.0 if alpha is None else alpha
        for tensor, other in zip(tensors, others, strict=False):
            known = self._values.get(tensor) if isinstance(tensor, self.torch.Tensor) else None
            if known is None:
                continue
            operand = self._of(other)
            try:
                if operation in (operator.add, operator.sub) and operand is not None:
                    operand *= alpha
                self._values[tensor] = None if operand is None else operation(known, operand)
            except (ArithmeticError, ValueError, TypeError):
                self._values[tensor] = None
            if self._values[tensor] is None:
                del self._values[tensor]

    def _forget_written(self, func: Any, args: tuple) -> None:
        """The values of the tensors the op's schema says it writes: unknown."""
        schema = getattr(func, "_schema", None)
        if schema is None or not self._values:
            return
        for argument, value in zip(schema.arguments, args, strict=False):
            alias = argument.alias_info
            if alias is None or not alias.is_write:
                continue
            for tensor in value if isinstance(value, list | tuple) else (value,):
                if isinstance(tensor, self.torch.Tensor):
                    self._values.pop(tensor, None)

    def _of(self, value: Any) -> float | None:
        if isinstance(value, bool | int | float):
            return float(value)
        if isinstance(value, self.torch.Tensor):
            return self._values.get(value)
        return None

    def _real(self, tensor: Any) -> float | None:
        """A real (not fake) one-element tensor's value, read with tpumem's modes off."""
        from torch.utils._python_dispatch import _disable_current_modes

        try:
            with _disable_current_modes():
                return float(tensor.item()) if tensor.numel() == 1 else None
        except Exception:
            return None

    def _truth(self, name: str, args: tuple) -> bool:
        """A bool op's stand-in truth (TRUE_OPS...), from its inputs' where it
        combines them; False for any other (a test that finds a fault)."""
        if name in TRUE_OPS:
            return True
        if name in ("eq", "ne") and len(args) == 2:
            other = args[1]
            infinite = isinstance(other, float) and not math.isfinite(other)
            return (name == "eq") != infinite
        truths = [self._truths.get(a, False) for a in args if isinstance(a, self.torch.Tensor)]
        if name in NOT_OPS:
            return not (truths and truths[0])
        if name in AND_OPS:
            return bool(truths) and all(truths)
        if name in OR_OPS:
            return any(truths)
        if (truths and len(args) == 1) or name in SAME:
            return bool(truths and truths[0])  # (a copy or a view of one truth)
        return False

    def value(self, tensor: Any) -> Any:
        """The stand-in for a fake tensor's value."""
        self.asked += 1
        dtype = tensor.dtype
        if dtype == self.torch.bool:
            return self._truths.get(tensor, False)
        known = self._values.get(tensor)
        if dtype.is_floating_point or dtype.is_complex:
            return 1.0 if known is None else known
        return 1 if known is None else int(known)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, bool | int | float) else None
