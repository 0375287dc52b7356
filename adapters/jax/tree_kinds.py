"""What the arrays a jitted call returns are for, read from the framework's own
objects in the pytree it returns, never from words in names:

- Flax NNX: each array sits in a Variable of the module's graph: `nnx.Param` a
  parameter, `OptState` (what `nnx.Optimizer` holds) optimizer state, any other
  Variable (`BatchStat`, `RngState`, caches) other state.
- optax: every array under one of optax's state objects (`ScaleByAdamState`'s
  `mu`, `nu` and `count`, ...) is optimizer state. A moment (`mu`) mirrors the
  parameters' tree: elsewhere in the same call, a subtree of exactly that
  structure is the parameters, whatever its keys are called.
- Flax linen: `TrainState.params`, and the `params` collection of a variables
  dict (its other collections, such as `batch_stats`, are other state).
- Keras 3's JAX trainer: `train_step` returns `(logs, state)` with the
  trainable, non-trainable, optimizer and metrics variables in `state[0..3]`
  (`test_step` and `predict_step` their own subsets).
- By fate, for what no object tells: an output that the next call of the same
  function takes back is state carried between steps; the rest is left untold.

Each function's regions are learned over its first calls (by output tree
structure) and then cost a dict lookup a call. Framework classes are looked up
in `sys.modules`: nothing is imported that the script did not import itself.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable
from typing import Any

from tpumem.adapters.book_rows import OPTIMIZER, OUTPUT, PARAMETER, STATE

# Calls of a function over which the fate of its outputs is watched.
LEARNING_CALLS = 3
_KERAS_TRAINER = "keras.src.backend.jax.trainer"
# Keras' JAX trainer: the regions of the state each step returns, in order, and
# where the state is in what it returns (`(logs, state)`, `(outputs, ntv)`).
_KERAS_STATES = {
    "train_step": (PARAMETER, STATE, OPTIMIZER, STATE),
    "test_step": (PARAMETER, STATE, STATE),
}
_LINEN_COLLECTIONS = {"params": PARAMETER}  # any other collection: STATE
# The entries of an NNX GraphDef that stand for no value (modules, shared refs).
_GRAPH_NODES = ("NodeDef", "NodeRef", "TreeNodeDef")


class OutputKinds:
    """One jitted function's outputs' regions, by the structure of its output."""

    __slots__ = ("_carried", "_fun", "_last", "_trains", "by_tree", "calls")

    def __init__(self, fun: Any) -> None:
        self._fun = fun
        self.by_tree: dict[Any, list[str] | None] = {}
        self.calls = 0
        # The outputs of the last call while learning: id -> (weakref, position).
        self._last: dict[int, tuple[Any, int]] = {}
        self._carried: set[int] = set()  # output positions a next call took back
        self._trains: bool | None = None  # known once told, or learning is over

    def regions(
        self, out: Any, leaves: list[Any], treedef: Any, arguments: Callable[[], list[Any]]
    ) -> list[str] | None:
        """Each output leaf's region; None where nothing tells any. `arguments`
        gives the call's argument leaves (read only while learning)."""
        if self.calls >= LEARNING_CALLS:
            if treedef in self.by_tree:
                return self.by_tree[treedef]
            regions = self.by_tree[treedef] = _filled(_told(self._fun, out, len(leaves)), set())
            return regions
        self.calls += 1
        last = self._last
        if last:
            for leaf in arguments():
                seen = last.get(id(leaf))
                if seen is not None and seen[0]() is leaf:
                    self._carried.add(seen[1])
        regions = _filled(_told(self._fun, out, len(leaves)), self._carried)
        self.by_tree[treedef] = regions
        self._last = {}
        if self.calls < LEARNING_CALLS:
            for position, leaf in enumerate(leaves):
                # (A leaf that takes no weak reference is no array.)
                with contextlib.suppress(TypeError):
                    self._last[id(leaf)] = (weakref.ref(leaf), position)
        return regions

    @property
    def trains(self) -> bool:
        """Whether an output of the function is optimizer state: a training step
        (read while learning; a dict lookup's cost after)."""
        if self._trains is None:
            trains = any(r is not None and OPTIMIZER in r for r in self.by_tree.values())
            if trains or self.calls >= LEARNING_CALLS:
                self._trains = trains
            return trains
        return self._trains

    def arguments(self, leaves: list[Any], tree: Any) -> list[str | None] | None:
        """While learning: the region each argument leaf's objects tell (the
        first call's arguments were made before any step told them), None
        where none tells any."""
        if self.calls >= LEARNING_CALLS or not leaves:
            return None
        told = _told(None, tree, len(leaves))
        return told if any(r is not None for r in told) else None


def told(tree: Any, count: int) -> list[str | None]:
    """The region each of `tree`'s `count` leaves' objects tell (None where none
    does, or where reading the tree fails)."""
    return _told(None, tree, count)


def _filled(told: list[str | None], carried: set[int]) -> list[str] | None:
    regions = [
        kind if kind is not None else STATE if position in carried else OUTPUT
        for position, kind in enumerate(told)
    ]
    return regions if any(r != OUTPUT for r in regions) else None


def _told(fun: Any, out: Any, count: int) -> list[str | None]:
    """The region each of `out`'s leaves' objects tell; none where reading the
    tree fails (a pytree type of the script's that flattens only its own way):
    what a call returns is never held up by tpumem's reading of it."""
    try:
        return _read(fun, out, count)
    except Exception:
        return [None] * count


def _read(fun: Any, out: Any, count: int) -> list[str | None]:
    from jax import tree_util

    keras = _keras_states(fun)
    if keras is not None and isinstance(out, tuple) and len(out) == 2:
        head, state = out
        told: list[str | None] = [STATE] * len(tree_util.tree_leaves(head))
        if isinstance(state, (tuple, list)) and len(state) == len(keras):
            for region, part in zip(keras, state, strict=True):
                told += [region] * len(tree_util.tree_leaves(part))
        else:
            told += [STATE] * len(tree_util.tree_leaves(state))
        if len(told) == count:
            return told
    walk = _Walk(tree_util)
    walk.learn_mirrors(out)
    walk.visit(out, None)
    return walk.told if len(walk.told) == count else [None] * count


def _keras_states(fun: Any) -> tuple[str, ...] | None:
    """The state layout of a Keras JAX trainer's step, where `fun` is one."""
    trainer = sys.modules.get(_KERAS_TRAINER)
    owner = getattr(fun, "__self__", None)
    if trainer is None or owner is None:
        return None
    if not isinstance(owner, getattr(trainer, "JAXTrainer", ())):
        return None
    return _KERAS_STATES.get(getattr(fun, "__name__", ""))


class _Walk:
    """Visits a pytree in its leaves' order, giving each leaf the region of the
    nearest object above it that tells one."""

    def __init__(self, tree_util: Any) -> None:
        self.tree_util = tree_util
        self.told: list[str | None] = []
        nnx = sys.modules.get("flax.nnx")
        self.variable = getattr(nnx, "Variable", None)
        self.param = getattr(nnx, "Param", None)
        self.node_states = getattr(sys.modules.get("flax.nnx.extract"), "NodeStates", None)
        self.variable_def = getattr(sys.modules.get("flax.nnx.graphlib"), "VariableDef", None)
        optimizer = sys.modules.get("flax.nnx.training.optimizer")
        self.opt_state = getattr(optimizer, "OptState", None)
        train_state = sys.modules.get("flax.training.train_state")
        self.train_state = getattr(train_state, "TrainState", None)
        self.linen = "flax.linen" in sys.modules
        self.mirrors: set[Any] = set()  # tree structures of optax states' parts

    def children(self, node: Any) -> list[tuple[Any, Any]] | None:
        """(key, child) one level down; None for a leaf. (None is an empty node.)"""
        pairs, _ = self.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
        if len(pairs) == 1 and not pairs[0][0]:
            return None  # the node is a leaf itself
        return [(path[0], child) for path, child in pairs if child is not None]

    def visit(self, node: Any, region: str | None) -> None:
        states = self.node_states
        graph = region is None and states is not None and isinstance(node, states)
        if graph and self._graph_states(node):
            return
        if region is None:
            region = self._own(node)
        children = self.children(node)
        if children is None:
            self.told.append(region)
            return
        for key, child in children:
            self.visit(child, region if region is not None else self._by_key(node, key))

    def _own(self, node: Any) -> str | None:
        if self.variable is not None and isinstance(node, self.variable):
            return self._variable_region(type(node))
        if self._is_optax(node):
            return OPTIMIZER
        mirrored = self.mirrors and type(node) in (dict, list, tuple)
        if mirrored and self.tree_util.tree_structure(node) in self.mirrors:
            return PARAMETER
        return None

    def _variable_region(self, kind: type) -> str:
        """An NNX Variable's region by its class."""
        if self.opt_state is not None and issubclass(kind, self.opt_state):
            return OPTIMIZER
        return PARAMETER if self.param is not None and issubclass(kind, self.param) else STATE

    def _graph_states(self, node: Any) -> bool:
        """`nnx.jit` hands JAX a module's graph as its GraphDef and the flat list
        of its Variables' values: the GraphDef lists each Variable's class in the
        values' order. Read so where the counts agree (False where not)."""
        graphdef = getattr(node, "_graphdef", None)
        nodes = getattr(graphdef, "nodes", None)
        if not isinstance(nodes, list) or self.variable_def is None:
            return False
        kinds = [n.type for n in nodes if isinstance(n, self.variable_def)]
        if len(kinds) != len(nodes) - sum(1 for n in nodes if type(n).__name__ in _GRAPH_NODES):
            return False  # a value that is no Variable's (an array reference)
        values = self.tree_util.tree_leaves(node)
        if len(values) != len(kinds) or not all(isinstance(k, type) for k in kinds):
            return False
        self.told += [self._variable_region(k) for k in kinds]
        return True

    def _by_key(self, parent: Any, key: Any) -> str | None:
        if self.train_state is not None and isinstance(parent, self.train_state):
            return PARAMETER if getattr(key, "name", None) == "params" else None
        if self.linen and _is_variables(parent):
            collection = getattr(key, "key", None)
            if isinstance(collection, str):
                return _LINEN_COLLECTIONS.get(collection, STATE)
        return None

    def _is_optax(self, node: Any) -> bool:
        module = type(node).__module__
        return isinstance(node, tuple) and isinstance(module, str) and module.startswith("optax.")

    def learn_mirrors(self, tree: Any) -> None:
        """The structures of optax's per-parameter states (a moment `mu` mirrors
        the parameters), anywhere in `tree`, optax states nested in others
        (`inject_hyperparams`, `MultiSteps`) included."""
        for node in self.tree_util.tree_leaves(tree, is_leaf=self._is_optax):
            if self._is_optax(node):
                self._parts(node)

    def _parts(self, state: Any) -> None:
        for part in state:
            if part is None or not self.children(part):
                continue
            nodes = self.tree_util.tree_leaves(part, is_leaf=self._is_optax)
            inner = [n for n in nodes if self._is_optax(n)]
            for nested in inner:
                self._parts(nested)
            if not inner:
                self.mirrors.add(self.tree_util.tree_structure(part))


def _is_variables(node: Any) -> bool:
    """A linen variables dict: a dict (or FrozenDict) whose `params` collection
    is a subtree."""
    if not (type(node) is dict or _is_frozen_dict(node)) or "params" not in node:
        return False
    params = node["params"]
    return type(params) is dict or _is_frozen_dict(params)


def _is_frozen_dict(node: Any) -> bool:
    core = sys.modules.get("flax.core.frozen_dict")
    return core is not None and isinstance(node, getattr(core, "FrozenDict", ()))
