"""The plan benchmark (``nlqo bench-plans``): plans scored against gold decompositions, in seconds.

Two steps, so that only the first needs the LLM:

1. **Parse** (:func:`parse_all`): each question is parsed once and the parse is kept on disk, one
   JSON file per question (:class:`ParseCache`), named by a digest of the question's text, the
   model and every setting that changes a parse (the prompts included). With the IR the file keeps
   the LLM's answers about the atom pairs the triples leave undecided (what the engine's relation
   step would ask), so planning later needs no LLM. Questions already in the cache are skipped: a
   stopped run resumes, and it can run in the background (``--parse-only``).
2. **Score** (:func:`score_all`): each cached parse is planned under every variant (cost model x
   rule list x search) and the plan scored against the gold with :func:`nlqo.testing.plan_score`;
   one record per (question, variant). No LLM; the embedder (for the matching and the ``similarity``
   metric) embeds each distinct text once (:class:`MemoEmbedder`).

:mod:`nlqo.eval.plan_report` aggregates the records and writes the tables.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs
import numpy as np

from nlqo.common.passages import Embedder
from nlqo.common.resources import builtin_dir
from nlqo.common.storage import replace_atomically, writing
from nlqo.config import EngineConfig
from nlqo.errors import LLMError, NlqoError
from nlqo.ir.syntax import parse
from nlqo.optimizer.cost import CostModel, load_cost_model
from nlqo.optimizer.optimizer import Optimizer
from nlqo.optimizer.plan import Plan
from nlqo.optimizer.relations import RelationCache
from nlqo.optimizer.rewrite import Rule, load_rules
from nlqo.runtime.llm.base import LLM
from nlqo.runtime.prompts import planning
from nlqo.testing.gold import RELATIONS, Gold
from nlqo.testing.plan_score import PlanScore, atom_text, atom_words, plan_score

FORMAT = 1
"""Version of a cached parse file; a file of another version is parsed again."""
SEARCHES = ("dp", "greedy")
"""``dp``: the Selinger DP with the configured budget; ``greedy``: the greedy search alone (budget 0)."""
PARSE_SETTINGS = (
    "model",
    "runtime",
    "quantize",
    "repairs",
    "ir_cleanup",
    "constrained",
    "parse_atoms",
    "anchored",
    "span_constants",
    "anchor_repairs",
    "max_question_chars",
)
"""The :class:`~nlqo.config.EngineConfig` fields that change what a parse gives (threads do not)."""


def shipped_cost_models() -> tuple[str, ...]:
    """The cost models in nlqo's own ``cost_models/`` folder, by name.

    >>> "default" in shipped_cost_models() and "structural" in shipped_cost_models()
    True
    """
    return tuple(sorted(p.stem for p in builtin_dir("cost_models").glob("*.cost")))


@functools.cache
def prompts_digest() -> str:
    """A digest of the prompts a parse uses (parsing, repair, pair relations): a changed prompt is a new parse."""
    text = repr((planning.PARSE, planning.REPAIR, planning.RELATION))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def parse_key(question: str, config: EngineConfig) -> dict[str, Any]:
    """What a cached parse is keyed by: the question's text, the model, the parser's settings, the prompts."""
    return {
        "question": question,
        **{name: getattr(config, name) for name in PARSE_SETTINGS},
        "prompts": prompts_digest(),
    }


@attrs.define(eq=False)
class ParseCache:
    """One JSON file per parsed question in ``folder``, named by a digest of its :func:`parse_key`."""

    folder: Path
    config: EngineConfig

    def path(self, question: str) -> Path:
        key = json.dumps(parse_key(question, self.config), sort_keys=True, ensure_ascii=False)
        return self.folder / f"{hashlib.sha256(key.encode('utf-8')).hexdigest()[:24]}.json"

    def get(self, question: str) -> dict[str, Any] | None:
        """The cached parse of ``question`` under these settings, or None (a torn or foreign file counts as none)."""
        try:
            entry = json.loads(self.path(question).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(entry, dict) and entry.get("format") == FORMAT
        return entry if ok and entry.get("key") == parse_key(question, self.config) else None

    def put(self, question: str, entry: dict[str, Any]) -> Path:
        """Write ``entry`` atomically (a killed run never leaves half a file)."""
        path = self.path(question)
        data = json.dumps({"format": FORMAT, "key": parse_key(question, self.config), **entry}, indent=1)
        with writing(path, "the parses before it are kept"):
            replace_atomically(path, data)
        return path


def parse_one(question: str, llm: LLM, config: EngineConfig) -> dict[str, Any]:
    """Parse ``question`` as the engine does and ask the LLM about the undecided atom pairs.

    A question the parser refuses or cannot parse is an entry with ``ir: null`` and the error (it
    is not asked again); a backend failure (:class:`~nlqo.errors.LLMError`) is raised, so that a
    resumed run tries that question again.
    """
    from nlqo.parser.parse import parse_configured
    from nlqo.parser.questions import check_question

    started = time.perf_counter()
    try:
        check_question(question, max_chars=config.max_question_chars)
        result = parse_configured(question, llm, config)
    except LLMError:
        raise
    except NlqoError as exc:
        return {"ir": None, "error": f"{type(exc).__name__}: {exc}", "relations": {}, "seconds": _since(started)}
    relations = RelationCache()
    relation_error = None
    try:  # the engine's relation step: pairs the triples leave undecided go to the LLM, answers to the cache
        Optimizer(
            cost_model=load_cost_model("structural"), llm=llm, cache=relations, constrained=config.constrained
        ).optimize(result.query)
    except LLMError:
        raise
    except NlqoError as exc:  # e.g. no atom can hang under the question: the answers given so far are kept
        relation_error = f"{type(exc).__name__}: {exc}"
    usage = result.usage
    return {
        "ir": result.text,
        "error": None,
        "relations": dict(sorted(relations.entries.items())),
        "relation_error": relation_error,
        "warnings": list(result.warnings),
        "attempts": result.attempts,
        "generated_tokens": usage.generated_tokens,
        "forced_tokens": usage.forced_tokens,
        "seconds": _since(started),
    }


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 3)


@attrs.frozen
class ParseReport:
    questions: int
    cached: int
    parsed: int
    failed: int
    seconds: float


def parse_all(
    golds: Sequence[Gold],
    cache: ParseCache,
    load_llm: Callable[[], LLM],
    *,
    progress: Callable[[str], None] | None = None,
) -> ParseReport:
    """Parse every question not in ``cache`` yet (the LLM is loaded only when one is missing)."""
    started = time.perf_counter()
    questions = list(dict.fromkeys(g.question for g in golds))
    todo = [q for q in questions if cache.get(q) is None]
    llm = load_llm() if todo else None
    failed = 0
    for n, question in enumerate(todo, 1):
        assert llm is not None
        entry = parse_one(question, llm, cache.config)
        cache.put(question, entry)
        failed += entry["ir"] is None
        if progress is not None:
            spent = time.perf_counter() - started
            left = spent / n * (len(todo) - n)
            what = f"{len(parse(entry['ir']).atoms)} atoms" if entry["ir"] else f"failed: {entry['error'][:80]}"
            progress(
                f"[{n}/{len(todo)}] {entry['seconds']:.1f} s, {what}; about {left / 60:.0f} min left: {question[:70]}"
            )
    return ParseReport(len(questions), len(questions) - len(todo), len(todo), failed, _since(started))


@attrs.define(eq=False)
class MemoEmbedder:
    """An embedder that embeds each distinct text once (the matching and ``similarity`` share it),
    optionally kept in a file between runs (``open``/``save``), so scoring again embeds only new texts."""

    base: Embedder
    vectors: dict[str, np.ndarray] = attrs.field(factory=dict)
    seconds: float = 0.0
    """Time spent in the base embedder."""
    path: Path | None = None
    name: str = attrs.field(init=False)
    dim: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.name = str(getattr(self.base, "name", type(self.base).__name__))
        self.dim = int(getattr(self.base, "dim", 0))

    @classmethod
    def open(cls, base: Embedder, folder: Path) -> MemoEmbedder:
        """The embeddings kept in ``folder`` for ``base`` (by its name); a file that cannot be read counts as none."""
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(getattr(base, "name", "embedder")))
        path = folder / f"embeddings-{name}.npz"
        memo = cls(base, path=path)
        try:
            with np.load(path, allow_pickle=False) as data:
                memo.vectors = dict(zip(data["texts"].tolist(), data["vectors"]))
        except (OSError, ValueError, KeyError):
            pass
        return memo

    def save(self) -> None:
        if self.path is None or not self.vectors:
            return
        with writing(self.path, "the embeddings are only a cache"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.tmp.npz")
            texts = np.array(list(self.vectors), dtype=str)
            np.savez(tmp, texts=texts, vectors=np.stack(list(self.vectors.values())))
            os.replace(tmp, self.path)

    def encode(self, texts: Sequence[str], *, kind: str = "query", progress: bool | None = None) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            started = time.perf_counter()
            for text, vector in zip(missing, self.base.encode(missing, kind=kind, progress=False)):
                self.vectors[text] = np.asarray(vector, dtype=np.float32)
            self.seconds += time.perf_counter() - started
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.vectors[t] for t in texts])


@attrs.frozen
class Variant:
    """One way of planning: a cost model, a rule list and a search."""

    cost_model: str
    rules: str
    search: str

    @property
    def name(self) -> str:
        """``cost model / rules / search``.

        >>> Variant("default", "default", "dp").name
        'default / default / dp'
        """
        return f"{self.cost_model} / {self.rules} / {self.search}"


def variants(cost_models: Iterable[str], rule_lists: Iterable[str], searches: Iterable[str]) -> tuple[Variant, ...]:
    """Every combination, cost models outermost."""
    rule_lists, searches = tuple(rule_lists), tuple(searches)
    bad = [s for s in searches if s not in SEARCHES]
    if bad:
        raise NlqoError(f"unknown search {bad[0]!r}: choose among {', '.join(SEARCHES)}")
    return tuple(Variant(c, r, s) for c in cost_models for r in rule_lists for s in searches)


@attrs.define(eq=False)
class Planner:
    """Plans a cached parse under one variant; cost models and rule lists are loaded once."""

    variant: Variant
    model: CostModel
    rules: tuple[tuple[str, Rule], ...]
    config: EngineConfig
    embedder: Embedder | None

    @classmethod
    def load(
        cls,
        variant: Variant,
        config: EngineConfig,
        embedder: Embedder | None,
        models: dict[str, CostModel] | None = None,
    ) -> Planner:
        model = (models or {}).get(variant.cost_model) or load_cost_model(variant.cost_model, path=config.path)
        if config.params:
            model = model.with_params(**config.param_dict)
        rules = () if variant.rules == "none" else load_rules(variant.rules, config.path)
        named = attrs.evolve(variant, cost_model=model.name)  # a .cost file is shown by its name
        return cls(named, model, tuple(rules), config, embedder if "similarity" in model.names else None)

    def plan(self, ir: str, question: str, relations: dict[str, str]) -> Plan:
        query = attrs.evolve(parse(ir, source="<cached parse>"), question=question)
        return Optimizer(
            cost_model=self.model,
            embedder=self.embedder,
            cache=RelationCache(entries=dict(relations)),
            rules=self.rules,
            budget=self.config.budget if self.variant.search == "dp" else 0,
            beam=self.config.beam,
            max_atoms=self.config.max_atoms,
        ).optimize(query)


def score_all(
    golds: Sequence[Gold],
    cache: ParseCache,
    planners: Sequence[Planner],
    embedder: Embedder,
    *,
    threshold: float,
) -> tuple[list[dict[str, Any]], list[Gold]]:
    """One record per (gold with a cached parse, planner); and the golds that have no cached parse."""
    records: list[dict[str, Any]] = []
    entries = {gold.question: cache.get(gold.question) for gold in golds}
    missing = [gold for gold in golds if entries[gold.question] is None]
    if isinstance(embedder, MemoEmbedder):  # one batched call embeds what the matching compares
        embedder.encode(_texts(golds, entries))
    for gold in golds:
        entry = entries[gold.question]
        if entry is None:
            continue
        for planner in planners:
            plan, error, started = None, entry.get("error"), time.perf_counter()
            if entry.get("ir"):
                try:
                    plan = planner.plan(entry["ir"], gold.question, entry.get("relations") or {})
                except NlqoError as exc:
                    error = f"{type(exc).__name__}: {exc}"
            ms = (time.perf_counter() - started) * 1000
            score = plan_score(plan, gold, embedder=embedder, threshold=threshold)
            records.append(record(gold, planner.variant, plan, score, error=error, planning_ms=ms))
    return records, missing


def _texts(golds: Sequence[Gold], entries: Mapping[str, dict[str, Any] | None]) -> list[str]:
    """The texts the matching embeds: the atoms of the cached parses (both readings) and the gold steps."""
    texts = [step.words for gold in golds if gold.textual for step in gold.steps]
    for entry in entries.values():
        if entry is not None and entry.get("ir"):
            try:
                atoms = parse(entry["ir"], source="<cached parse>").atoms
            except NlqoError:  # scoring reports it as that question's error
                continue
            texts += [t for atom in atoms for t in (atom_words(atom), atom_text(atom))]
    return list(dict.fromkeys(texts))


def record(
    gold: Gold, variant: Variant, plan: Plan | None, score: PlanScore, *, error: str | None, planning_ms: float
) -> dict[str, Any]:
    """The JSON record of one plan's score: the counts the tables pool, the figures, the plan itself."""
    right = {k: score.relation_counts(k) for k in RELATIONS}
    return {
        "dataset": gold.dataset,
        "id": gold.id,
        "question": gold.question,
        "kind": gold.kind,
        "hops": gold.hops,
        "textual": gold.textual,
        "gold_depth": gold.depth,
        "gold_chain": gold.chain,
        "cost_model": variant.cost_model,
        "rules": variant.rules,
        "search": variant.search,
        "variant": variant.name,
        "planned": score.planned,
        "error": error,
        "atoms": score.atoms,
        "matched": score.matched,
        "steps": score.steps,
        "leaves": score.leaves,
        "bare_leaves": len(score.bare_leaves),
        "gold_edges": score.gold_edges,
        "edges_found": score.edges_found,
        "edge_outcomes": dict(score.edge_outcomes),
        "relations": {k: {"right": r, "pairs": n} for k, (r, n) in right.items()},
        "confusion": {k: dict(v) for k, v in score.confusion.items()},
        "depth": score.depth,
        "chain": score.chain,
        **score.figures(),
        "matches": [[m.atom, m.step + 1, m.similarity, m.overlap] for m in score.matches],
        "plan": None if plan is None else _plan_json(plan),
        "planning_ms": round(planning_ms, 3),
    }


def _plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "parent": dict(plan.tree.parent),
        "atoms": {a.id: a.text() for a in plan.query.atoms},
        "left_out": [x.id for x in plan.left_out],
        "exact": plan.stats.exact,
        "method": plan.stats.method,
        "defaulted_pairs": sum(1 for s in plan.relation_source.values() if str(s) == "default"),
    }


def run_facts(
    config: EngineConfig, embedder: Embedder, threshold: float, entity_weight: float, seed: int
) -> dict[str, Any]:
    """What a scoring run's tables depend on, for ``run.json`` and the tables' footnote."""
    from nlqo.eval.host import machine, now, source_commit

    on = {True: "on", False: "off"}
    settings = (
        f"{config.runtime}, constrained {on[config.constrained]}, repairs {config.repairs}, "
        f"at most {config.parse_atoms} atoms"
    )
    return {
        "model": config.model,
        "parse_settings": settings,
        "prompts": prompts_digest(),
        "embedder": getattr(embedder, "name", type(embedder).__name__),
        "threshold": threshold,
        "entity_weight": entity_weight,
        "seed": seed,
        "budget": config.budget,
        "cpus": os.cpu_count(),
        "machine": machine(),
        "commit": source_commit(),
        "finished": now(),
    }


def write_results(
    out: Path, records: Sequence[dict[str, Any]], run: dict[str, Any], *, seed: int, docs: Path | None = None
) -> list[dict[str, Any]]:
    """``records.jsonl``, ``summary.json``, ``results.md`` and ``run.json`` in ``out`` (and the block
    of ``docs``); returns the summary rows."""
    from nlqo.common.docblocks import write_block
    from nlqo.eval import plan_report

    rows = plan_report.summarize(records, seed=seed)
    table = plan_report.report(rows, run)
    with writing(out, "the parse cache is kept"):
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "records.jsonl", "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        (out / "summary.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
        (out / "results.md").write_text(f"# Plans against gold decompositions\n\n{table}\n", encoding="utf-8")
        (out / "run.json").write_text(json.dumps(run, indent=1), encoding="utf-8")
    if docs is not None:
        write_block(docs, plan_report.BLOCK, table, title="Benchmarks")
    return rows


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
