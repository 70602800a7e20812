"""CP-SAT for the forest's step-timed programs, driven through OR-Tools' C++ model helper.

``ortools.sat.python.cp_model`` imports pandas when it loads (for its Series helpers, which these
programs never use): 0.2 s of CPU on an idle machine, 0.5-0.7 s on a loaded one, paid by every
compile that builds a program.  Its model and solver classes are thin Python layers over
``ortools.sat.python.cp_model_helper`` (C++), which loads without pandas.  :class:`Model` and
:class:`Solver` make the same helper calls as ``cp_model.CpModel`` and ``cp_model.CpSolver`` for
the few methods the programs use (the same variables, constraints, hints and objective in the
same order), so the model proto, and with it CP-SAT's answer, is the same
(``tests/test_forest_sat.py`` compares the protos' text).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ortools.sat.python import cp_model_helper as cmh
from ortools.util.python.sorted_interval_list import Domain

OPTIMAL = cmh.CpSolverStatus.OPTIMAL
FEASIBLE = cmh.CpSolverStatus.FEASIBLE
IntVar = cmh.IntVar


class Model(cmh.CpBaseModel):
    """A CP-SAT model (``cp_model.CpModel``'s methods of the same names)."""

    def __init__(self) -> None:
        cmh.CpBaseModel.__init__(self, None)

    @property
    def proto(self) -> Any:
        """The model proto the solver reads."""
        return self.model_proto

    def new_int_var(self, lb: int, ub: int, name: str) -> IntVar:
        """A new integer variable with domain [lb, ub]."""
        return cmh.IntVar(self.model_proto).with_name(name).with_domain(Domain(lb, ub))

    def new_bool_var(self, name: str) -> IntVar:
        """A new Boolean variable."""
        return cmh.IntVar(self.model_proto).with_name(name).with_domain(Domain(0, 1))

    def add(self, ct: Any) -> Any:
        """Adds a bounded linear expression (``x <= 3``, ``sum(...) == 1``)."""
        if not isinstance(ct, cmh.BoundedLinearExpression):
            raise TypeError(f"not supported: Model.add({type(ct).__name__!r})")
        return self._add_bounded_linear_expression(ct)

    def add_exactly_one(self, literals: Iterable[Any]) -> Any:
        """Adds ``sum(literals) == 1``."""
        return self._add_bool_argument_constraint(cmh.BoolArgumentConstraint.exactly_one,
                                                  literals)

    def add_hint(self, var: IntVar, value: int) -> None:
        """Hints ``var = value`` to the search."""
        if var.index >= 0:
            self.model_proto.solution_hint.vars.append(var.index)
            self.model_proto.solution_hint.values.append(int(value))
        else:
            self.model_proto.solution_hint.vars.append(-var.index - 1)
            self.model_proto.solution_hint.values.append(int(not value))

    def minimize(self, expr: Any) -> None:
        """Sets the objective: minimize the integer linear expression ``expr``."""
        self.model_proto.clear_objective()
        self.model_proto.clear_floating_point_objective()
        flat = cmh.FlatIntExpr(expr)
        for var in flat.vars:
            self.model_proto.objective.vars.append(var.index)
        self.model_proto.objective.scaling_factor = 1.0
        self.model_proto.objective.offset = flat.offset
        self.model_proto.objective.coeffs.extend(flat.coeffs)


class Solver:
    """``cp_model.CpSolver``'s ``parameters``, ``solve`` and ``value``."""

    def __init__(self) -> None:
        self.parameters = cmh.SatParameters()
        self._response: Any = None

    def solve(self, model: Model) -> Any:
        """Solve ``model`` with :attr:`parameters`; the status."""
        wrapper = cmh.SolveWrapper()
        wrapper.set_parameters(self.parameters)
        self._response = wrapper.solve(model.proto)
        return self._response.status

    def value(self, expr: Any) -> int:
        """The value of ``expr`` in the last solution."""
        return cmh.ResponseHelper.value(self._response, expr)
