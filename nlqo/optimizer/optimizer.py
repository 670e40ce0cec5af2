"""Query in, cheapest logical query tree out.

>>> from nlqo.ir.syntax import parse
>>> from nlqo.optimizer.cost import load_cost_model
>>> q = parse('q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "born in", ?city)\\nanswer ?city')
>>> plan = optimize(q, cost_model=load_cost_model("structural"))
>>> dict(plan.tree.parent)
{'q1': 'q2', 'q2': '$root'}
"""

from __future__ import annotations

import time
from typing import Sequence

import attrs

from nlqo.config import default
from nlqo.optimizer.cost import CostContext, CostModel, load_cost_model
from nlqo.errors import LimitError, OptimizeError
from nlqo.ir import Query
from nlqo.kinds import RelationSource
from nlqo.runtime.llm.base import LLM, Usage
from nlqo.runtime.llm.constrain import can_constrain, choice, constrained_chat
from nlqo.optimizer import dp
from nlqo.optimizer.graph import JoinGraph, join_graph, parents_of
from nlqo.optimizer.greedy import greedy
from nlqo.optimizer.verify import verify
from nlqo.common.passages import Embedder
from nlqo.ir.pins import check_pins
from nlqo.optimizer.plan import ROOT, Cost, LeftOut, Plan, SearchStats, Tree
from nlqo.runtime.prompts import planning
from nlqo.optimizer.relations import RelationCache, Relations, llm_asker, resolve
from nlqo.optimizer.rewrite import Program, Rule, load_rules, rewrite

MAX_ATOMS: int = default("max_atoms")
"""Atoms the optimizer plans by default; pair relations grow with the square of the count."""


YES_NO = choice(("yes", "no"), name="yes-no")
"""A merge-check reply constrained: yes or no."""


@attrs.frozen
class _Searched:
    """The search phase's outcome: the tree, and what the merge checks did to get it."""

    tree: Tree
    cost: Cost
    stats: SearchStats
    graph: JoinGraph
    """The join graph the tree was found on: without the edges the merge checks rejected."""
    warnings: tuple[str, ...]
    merge_checks: int
    merge_rejections: int
    merge_usage: Usage


@attrs.define(eq=False)
class Optimizer:
    """Plans queries under one cost model. Stateless between queries except for the caches."""

    cost_model: CostModel = attrs.field(factory=lambda: load_cost_model("structural"))
    embedder: Embedder | None = None
    llm: LLM | None = None
    """Asked about undecided atom pairs and, with ``context_merge``, about merges."""
    cache: RelationCache | None = None
    rules: Sequence[tuple[str, Rule]] | None = None
    """Rewrite rules (default: ``rules/default.rules``); ``()`` runs none."""
    budget: int = default("budget")
    """Sub-plan pairs the DP may consider before the greedy fallback."""
    beam: int = default("beam")
    """Sub-plans kept per frontier."""
    context_merge: bool = default("context_merge")
    """Ask the LLM to confirm LLM-decided edges of the chosen plan, with the plan in the prompt."""
    max_merge_rounds: int = 3
    max_atoms: int = MAX_ATOMS
    """Queries with more atoms are refused with a :class:`LimitError` before any work."""
    constrained: bool = default("constrained")
    """Constrain relation and merge-check replies to their allowed words where the LLM can."""

    def optimize(self, query: Query) -> Plan:
        """The phases in order: admit, rewrite, relate atom pairs, search (with merge checks),
        account for atoms left out, assemble and verify the plan."""
        started = time.perf_counter()
        self._admit(query)
        program = self._rewrite(query)
        q = program.query
        relations = self._relate(q)
        searched = self._search_with_merge_checks(q, join_graph(q, relations.table), relations)
        left_out, unplaced_warnings = self._left_out(q, searched.tree, searched.graph)
        stats = attrs.evolve(
            searched.stats,
            planning_ms=(time.perf_counter() - started) * 1000,
            llm_calls=relations.stats.llm_calls + searched.merge_usage.calls,
            llm_usage=relations.stats.usage + searched.merge_usage,
            cache_hits=relations.stats.cache_hits,
            pruned_pairs=relations.stats.pruned_pairs,
            merge_checks=searched.merge_checks,
            merge_rejections=searched.merge_rejections,
        )
        if self.cache is not None:
            self.cache.save()
        plan = Plan(
            query=q,
            tree=searched.tree,
            cost=searched.cost,
            stats=stats,
            left_out=program.left_out + left_out,
            warnings=(*program.warnings, *searched.warnings, *unplaced_warnings),
            relations=dict(relations.table),
            relation_source=dict(relations.source),
        )
        return verify(plan, searched.graph)

    def _admit(self, query: Query) -> None:
        """Refuse what the optimizer will not plan, before any work."""
        if len(query.atoms) > self.max_atoms:
            raise LimitError(
                f"the query has {len(query.atoms)} atoms, more than the optimizer plans ({self.max_atoms}; "
                "raise it with --max-atoms N or Optimizer(max_atoms=N))"
            )
        check_pins(query.relations, source="<query>")

    def _rewrite(self, query: Query) -> Program:
        program = rewrite(query, self.rules if self.rules is not None else load_rules())
        check_pins(program.query.relations, source="<query after the rewrite rules>")
        return program

    def _relate(self, q: Query) -> Relations:
        """Every atom pair's relation: pinned, inferred, cached, or asked of the LLM."""
        ask = llm_asker(self.llm, constrained=self.constrained) if self.llm is not None else None
        return resolve(q, ask=ask, cache=self.cache)

    def _search_with_merge_checks(self, q: Query, graph: JoinGraph, relations: Relations) -> _Searched:
        """The cheapest tree; with ``context_merge``, re-planned without each edge the LLM rejects in
        the context of the plan, for at most ``max_merge_rounds`` rounds (a rejection after the last
        round is reported, and the plan keeps that edge)."""
        ctx = CostContext(q, relations.table, self.embedder)
        warnings: list[str] = []
        checks = rejections = 0
        usage = Usage()
        for round_ in range(self.max_merge_rounds + 1):
            tree, cost, stats = self._search(graph, ctx)
            if stats.fallback:
                warnings.append(f"the DP considered {self.budget} sub-plan pairs without finishing: greedy search used")
            elif stats.beam_dropped:
                warnings.append(
                    f"the DP's beam ({self.beam} sub-plans a frontier) cut {stats.beam_dropped}: the plan may not be the cheapest"
                )
            if not (self.context_merge and self.llm is not None):
                break
            rejected, asked, used = self._check_merges(q, tree, relations)
            checks += asked
            usage = usage + used
            if rejected is None:
                break
            rejections += 1
            if round_ < self.max_merge_rounds:
                warnings.append(f"merge check rejected {rejected[1]} under {rejected[0]}: re-planned without that edge")
                graph = graph.without(*rejected)
            else:  # no round left to re-plan in: keep the edge, say so
                warnings.append(
                    f"merge check rejected {rejected[1]} under {rejected[0]}, but the merge rounds "
                    f"({self.max_merge_rounds}) are used up: the plan keeps that edge"
                )
        return _Searched(tree, cost, stats, graph, tuple(warnings), checks, rejections, usage)

    def _left_out(self, q: Query, tree: Tree, graph: JoinGraph) -> tuple[tuple[LeftOut, ...], tuple[str, ...]]:
        """The atoms no valid tree includes, each with its reason; an error when none is placed."""
        placed = {c for c, _ in tree.parent}
        unplaced = [a for a in q.ids if a not in placed]
        if q.atoms and not placed:
            reasons = "; ".join(f"{a}: {_why_left_out(a, placed, graph)}" for a in unplaced)
            raise OptimizeError(f"no atom can hang under the question, so there is nothing to plan ({reasons})")
        warnings = (
            (f"no valid tree includes {', '.join(unplaced)}: planned the largest joinable set",) if unplaced else ()
        )
        return tuple(LeftOut(a, _why_left_out(a, placed, graph), q.atom(a).text()) for a in unplaced), warnings

    def _search(self, graph: JoinGraph, ctx: CostContext) -> tuple[Tree, Cost, SearchStats]:
        model = self.cost_model
        result = dp.search(
            graph, budget=self.budget, beam=self.beam, directions=model.directions(), score=model.shape_cost
        )
        order = graph.ids
        if result.exhausted:
            parents = [greedy(graph, model.shape_cost)]
        else:
            parents = [dict(e.parent) for _, e in dp.iter_best(result)] or [{}]
        best: tuple | None = None
        for parent in parents:
            tree = Tree.build(ROOT, {order[c]: order[p] for c, p in parent.items()}, order)
            cost = self.cost_model.evaluate(tree, ctx)
            key = (cost.total, tree.parent)
            if best is None or key < best[0]:
                best = (key, tree, cost)
        assert best is not None
        because = []
        if result.exhausted:
            because.append(f"the DP's budget of {self.budget} sub-plan pairs ran out (greedy fallback)")
        if result.beam_dropped:
            because.append(f"the beam of {self.beam} cut {result.beam_dropped} sub-plans")
        if model.semantic:
            because.append(f"the search cannot prune on {', '.join(sorted(model.semantic))} (not declared structural)")
        stats = SearchStats(
            subsets=result.subsets,
            pairs=result.pairs,
            looks=result.looks,
            fallback=result.exhausted,
            method="greedy" if result.exhausted else "dp",
            candidates=len(parents),
            budget=self.budget,
            beam=self.beam,
            beam_dropped=result.beam_dropped,
            exact=not because,
            inexact_because=tuple(because),
        )
        return best[1], best[2], stats

    def _check_merges(self, q: Query, tree: Tree, relations: Relations) -> tuple[tuple[str, str] | None, int, Usage]:
        """First LLM-decided edge the LLM rejects in context, bottom-up; ``None`` if all pass."""
        checks, usage = 0, Usage()
        plan_text = "\n".join(
            "  " * d + (q.question or "the question" if n == ROOT else q.atom(n).text()) for n, d in tree.preorder()
        )
        for child in tree.postorder():
            if child == ROOT:
                continue
            parent = dict(tree.parent)[child]
            if parent == ROOT:
                continue
            pair = (parent, child) if (parent, child) in relations.source else (child, parent)
            if relations.source.get(pair) in (RelationSource.PINNED, RelationSource.INFERRED):
                continue
            key = f"merge\t{plan_text}\t{parent}\t{child}"
            verdict = self.cache.verdict(key) if self.cache is not None else None
            if verdict is None:
                prompt = planning.MERGE
                messages = prompt.messages(
                    question=q.question or "", tree=plan_text, child=q.atom(child).text(), parent=q.atom(parent).text()
                )
                llm = self.llm
                assert llm is not None  # merge checks run only with an LLM
                constraint = YES_NO if self.constrained and can_constrain(llm) else None
                reply = constrained_chat(
                    llm, messages, constraint, stop=prompt.stop, max_tokens=prompt.max_tokens, prefix_cache=False
                )
                checks += 1
                usage = usage + reply.usage
                verdict = "no" if reply.text.strip().lower().startswith("no") else "yes"
                if self.cache is not None:
                    self.cache.put_verdict(key, verdict)
            if verdict == "no":
                return (parent, child), checks, usage
        return None, checks, usage


def _why_left_out(atom: str, placed: set[str], graph: JoinGraph) -> str:
    parents = parents_of(graph, atom)
    if not parents:
        return "no valid tree includes it: its relations allow it under no node (no pair with it is parent/child, and it mentions no answer variable)"
    missing = [p for p in parents if p != ROOT and p not in placed]
    if missing and len(missing) == len(parents):
        return f"no valid tree includes it: it may only hang under {', '.join(missing)}, which the plan does not hold"
    return "no valid tree includes it"


def optimize(query: Query, **options) -> Plan:
    """Plan ``query`` with a one-off :class:`Optimizer` built from ``options``."""
    return Optimizer(**options).optimize(query)
