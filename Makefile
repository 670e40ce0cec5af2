# Two commands do everything on a fresh machine:
#   make demo   install into .venv and run the main job on the embedded default model
#   make test   install the test extras and run the whole test suite
# This Makefile and its folder, also when another checkout runs it with -f (bench-staged).
THIS := $(lastword $(MAKEFILE_LIST))
HERE := $(dir $(THIS))
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
NLQO := $(VENV)/bin/nlqo
# The bundled model `nlqo ask` uses by default (EngineConfig's, asked of the package: the venv's, else
# the source tree's; docs/models.md says why). On a fresh machine neither may import yet: then it is
# asked again when a recipe runs, after the install.
MODEL ?= $(shell for py in $(PY) $(PYTHON); do $$py -c 'from nlqo.config import DEFAULT_MODEL; print(DEFAULT_MODEL)' 2>/dev/null && break; done)
DEMO_INDEX ?= .nlqo/demo-index
QUESTION ?= In which city was the author of The Hobbit born?

.PHONY: mutation mutation-survivors fuzz demo test lint install install-test clean-venv bench bench-staged bench-report ablations experiments load-serve bench-statistics bench-confidence heldout-operators

$(VENV)/.base: pyproject.toml scripts/install-llama-cpp.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	# llama.cpp, the default runtime for GGUF models, built for AVX2 (a native build crashes on some CPUs).
	sh scripts/install-llama-cpp.sh $(PY)
	$(PY) -m pip install --quiet -e ".[all,embedder]"
	touch $@

install: $(VENV)/.base

$(VENV)/.test: $(VENV)/.base
	$(PY) -m pip install --quiet -e ".[test]"
	$(NLQO) models install smollm2-135m
	command -v dot >/dev/null 2>&1 || (apt-get install -y -qq graphviz >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq graphviz >/dev/null 2>&1)) || echo "graphviz not installed: DOT render checks will be skipped"
	command -v chromium >/dev/null 2>&1 || (apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1)) || echo "chromium not installed: the EXPLAIN page browser tests will be skipped"
	command -v nginx >/dev/null 2>&1 && command -v jq >/dev/null 2>&1 || (apt-get install -y -qq nginx-light jq >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq nginx-light jq >/dev/null 2>&1)) || echo "nginx or jq not installed: docs/serving.md's replica commands will be skipped"
	# llama.cpp's own server (slots), once per machine (~15 min on 2 cores; cached in ~/.cache/nlqo).
	sh scripts/build-llama-server.sh $(PY) || echo "llama-server not built: the multi-slot server tests will be skipped"
	touch $@

install-test: $(VENV)/.test

$(VENV)/.model-$(MODEL): $(VENV)/.base
	$(NLQO) models install $(MODEL)
	touch $@

$(DEMO_INDEX)/manifest.json: examples/demo_corpus.jsonl $(VENV)/.base
	$(NLQO) index examples/demo_corpus.jsonl --out $(DEMO_INDEX)

demo: install $(VENV)/.model-$(MODEL) $(DEMO_INDEX)/manifest.json
	$(NLQO) ask "$(QUESTION)" --index $(DEMO_INDEX) --model $(MODEL)

test: install-test lint
	$(PY) -m pytest -q

# Static checks, part of `make test`: ruff's bug-finding rules, ruff format (120 columns) and mypy over nlqo/ (pyproject.toml).
lint: install-test
	$(PY) -m ruff check nlqo tests benchmarks scripts
	$(VENV)/bin/lint-imports
	$(PY) -m ruff format --check nlqo tests benchmarks scripts
	$(PY) -m mypy

clean-venv:
	rm -rf $(VENV)

# The benchmark docs/benchmarks.md reports (issue 17), on the default model and runtime (llama.cpp,
# the GGUF weights as they are): the five strategies the claims rest on on 200 questions of each
# shared dev set (HotpotQA has 199; StrategyQA's yes/no questions joined for issue 50), and the other
# baselines on the first 100 (bench-baselines-*).
# Many hours of CPU; each run resumes where it stopped, so run `make bench` again until it
# finishes. One run at a time: llama.cpp uses every core and collapses when two runs share them.
# (The earlier int8 runs live in benchmarks/results/bench; they are labelled as such in the docs.)
BENCH_DATA ?= ../shared/data
BENCH_SETS ?= hotpotqa_dev_199 2wiki_dev_300 musique_dev_200 strategyqa_229
BENCH_LIMIT ?= 200
BASELINE_LIMIT ?= 100
BENCH_FLAGS ?= --limit $(BENCH_LIMIT) --strategies standard-rag,iter-retgen,linear,tree,auto
BASELINE_FLAGS ?= --limit $(BASELINE_LIMIT) --strategies no-rag,ircot,self-ask
BENCH_OUT ?= benchmarks/results/runs
# bench-staged grows every run to each of these sizes in turn (the baselines' runs to at most
# BASELINE_LIMIT), so that an interrupted benchmark has all sets and strategies on the same first
# questions rather than one set finished and the others not begun.
BENCH_STAGES ?= 25 50 100 150 200

bench: $(addprefix bench-,$(BENCH_SETS)) $(addprefix bench-baselines-,$(BENCH_SETS))
	$(MAKE) -f $(THIS) bench-report

# A run that already has a stage's questions (its question file's first n, all of a smaller set)
# is skipped (scripts/finished.py): on a new machine it would still build its index. To grow the
# runs with the code their records were made with, run `make -f /path/to/this/Makefile
# bench-staged` in a checkout of that commit: its .venv and code.
bench-staged: install $(VENV)/.model-$(MODEL)
	for n in $(BENCH_STAGES); do \
		b=$$(( n < $(BASELINE_LIMIT) ? n : $(BASELINE_LIMIT) )); \
		for s in $(BENCH_SETS); do \
			[ "$$($(PY) $(HERE)scripts/finished.py $(BENCH_OUT)/$$s $(BENCH_DATA)/$$s.jsonl.gz $$n)" = 0 ] || $(MAKE) -f $(THIS) --no-print-directory bench-$$s BENCH_LIMIT=$$n || exit 1; \
		done; \
		for s in $(BENCH_SETS); do \
			[ "$$($(PY) $(HERE)scripts/finished.py $(BENCH_OUT)/$$s-baselines $(BENCH_DATA)/$$s.jsonl.gz $$b)" = 0 ] || $(MAKE) -f $(THIS) --no-print-directory bench-baselines-$$s BASELINE_LIMIT=$$b || exit 1; \
		done; \
	done
	$(MAKE) -f $(THIS) bench-report

bench-baselines-%: install $(VENV)/.model-$(MODEL)
	$(NLQO) bench --questions $(BENCH_DATA)/$*.jsonl.gz --corpus $(BENCH_DATA)/$*_corpus.jsonl.gz --out $(BENCH_OUT)/$*-baselines --model $(MODEL) $(BASELINE_FLAGS)

bench-%: install $(VENV)/.model-$(MODEL)
	$(NLQO) bench --questions $(BENCH_DATA)/$*.jsonl.gz --corpus $(BENCH_DATA)/$*_corpus.jsonl.gz --out $(BENCH_OUT)/$* --model $(MODEL) $(BENCH_FLAGS)

# The report lists the runs in BENCH_SETS order, then the ablations, then any other result folders,
# then LEGACY_RUNS: none by default since the runs above passed the earlier int8 runs' 50 questions
# per set; `make bench-report LEGACY_RUNS="$(INT8_RUNS)"` puts the int8 runs (lossy; labelled so in
# every table) back.
REPORT_RUNS = $(wildcard $(addprefix $(BENCH_OUT)/,$(BENCH_SETS)) $(addprefix $(ABLATION_OUT)/,$(ABLATIONS) $(EXPERIMENTS)))
INT8_RUNS = $(wildcard $(addprefix benchmarks/results/bench/,$(BENCH_SETS)) benchmarks/results/ablations/*)
LEGACY_RUNS ?=
bench-report:
	$(NLQO) bench --report $(REPORT_RUNS) $(filter-out $(REPORT_RUNS),$(wildcard $(BENCH_OUT)/* $(ABLATION_OUT)/*)) $(LEGACY_RUNS)

# The ablations of issue 5, one result folder each, on the first ABLATION_LIMIT HotpotQA questions:
# the terminator threshold and KV reuse on the linear template; the similarity scale, the relation
# cache and parallel execution on the tree. `make -j2 ablations`, then `make bench-report`.
ABLATION_SET ?= hotpotqa_dev_199
ABLATION_LIMIT ?= 20
ABLATION_OUT ?= benchmarks/results/ablations-llamacpp
ABLATION_tau := --strategies linear --tau 0.8,0.85,0.9
ABLATION_kv-reuse := --strategies linear --kv-reuse on,off
ABLATION_alpha := --strategies tree --alpha 1,5,10,20
ABLATION_relation-cache := --strategies tree --relation-cache on,off
ABLATION_parallel := --strategies tree --parallel on,off

# More A/B runs (not in `make ablations`), for the levers docs/benchmarks.md names: the IR
# clean-up of the parser on tree and auto, the plan-step hints of auto's linear template, and the
# tree's guard against rewrites that only repeat the main question.
ABLATION_ir-cleanup := --strategies tree,auto --ir-cleanup off,on
ABLATION_plan-hints := --strategies auto --plan-hints on,off
ABLATION_guard-rewrites := --strategies tree --guard-rewrites off,on
ABLATION_tree-queries := --strategies tree,auto --tree-queries rewrite,substitute
ABLATION_plan-steps := --strategies auto --plan-steps off,on
ABLATION_simple-plans := --strategies auto --simple-plans linear,retrieve
# The run that set issue 17's defaults: the cheap baselines beside the tree's node questions
# (rewrite, substitute) and auto's choices (single-atom plans by one retrieval; plan steps; hints).
ABLATION_design := --strategies 'standard-rag,iter-retgen,tree[tree_queries=rewrite],tree[tree_queries=substitute],auto[simple_plans=retrieve],auto[simple_plans=retrieve,plan_steps=on],auto[simple_plans=retrieve,plan_hints=off]'
# The linear template's first hop by the question itself (question-first), on the design run's questions.
ABLATION_question-first := --strategies 'linear[question_first=off],linear[question_first=on],auto[question_first=on]'
# auto's seconds against iter-retgen's and ircot's (issue 17's seconds targets), the three side by
# side in one run on one machine: the benchmark's runs put ircot in a sibling run made hours apart.
# An experiment may name its own set and size (SET_<name>, LIMIT_<name>).
ABLATION_timing := --strategies iter-retgen,ircot,auto
SET_timing := musique_dev_200
LIMIT_timing := 40
ABLATIONS := tau kv-reuse alpha relation-cache parallel
EXPERIMENTS := ir-cleanup plan-hints guard-rewrites tree-queries plan-steps simple-plans design question-first timing

ablations: $(addprefix ablation-,$(ABLATIONS))

experiments: $(addprefix ablation-,$(EXPERIMENTS))

ablation-%: install $(VENV)/.model-$(MODEL)
	$(if $(ABLATION_$*),,$(error unknown ablation '$*'; the ablations are: $(ABLATIONS) $(EXPERIMENTS)))
	$(NLQO) bench --questions $(BENCH_DATA)/$(or $(SET_$*),$(ABLATION_SET)).jsonl.gz --corpus $(BENCH_DATA)/$(or $(SET_$*),$(ABLATION_SET))_corpus.jsonl.gz \
		--out $(ABLATION_OUT)/$* --model $(MODEL) --limit $(or $(LIMIT_$*),$(ABLATION_LIMIT)) \
		$(ABLATION_$*)

# Issue 38's benchmark: on each dev set, `nlqo analyze` on the first STAT_SAMPLE questions (it measures
# every operator itself; the recorded run reused linear's and tree's issue-17 records through
# benchmarks/seed_analyze.py at 197ff87: `git show 197ff87:benchmarks/seed_analyze.py`), then auto
# by those statistics on the held-back questions (--skip). Auto runs beside iter-retgen, interleaved
# in one run so their seconds compare, on the first STAT_PAIRED held-back questions; then alone on the
# rest (iter-retgen's EM on all of them comes from the issue-17 records: its code is unchanged).
# Hours of CPU; every step resumes where it stopped. Tables: python benchmarks/statistics_report.py.
STAT_SAMPLE ?= 50
STAT_PAIRED ?= 30
STAT_OUT ?= benchmarks/results/statistics
bench-statistics: $(addprefix statistics-,$(BENCH_SETS))

# Issue 40's load test of `nlqo serve` (docs/serving.md): the first LOAD_LIMIT HotpotQA questions from
# 1, 2, 4 and 8 clients, three runs each, on the 135M model and on the default one; never beside another benchmark.
LOAD_LIMIT ?= 16
LOAD_MODELS ?= smollm2-135m $(MODEL)
LOAD_INDEX ?= $(STAT_OUT)/hotpotqa_dev_199/index
load-serve: install-test $(VENV)/.model-$(MODEL)
	[ -f $(LOAD_INDEX)/manifest.json ] || $(NLQO) index $(BENCH_DATA)/hotpotqa_dev_199_corpus.jsonl.gz --out $(LOAD_INDEX)
	$(PY) benchmarks/bench_load.py --models $(LOAD_MODELS) --index $(LOAD_INDEX) --questions $(BENCH_DATA)/hotpotqa_dev_199.jsonl.gz --limit $(LOAD_LIMIT)

# Issue 50's confidence measurements (docs/statistics.md): retrieve with the decoder's confidence on each set's
# first CONF_LIMIT questions and linear on the first CONF_LINEAR, then the bundled calibration refitted on the
# first 50 and checked on the rest. Resumable; hours of CPU for the whole of it.
CONF_SETS ?= $(BENCH_SETS)
CONF_LIMIT ?= 100
CONF_LINEAR ?= 25
CONF_OUT ?= benchmarks/results/confidence
bench-confidence: install $(VENV)/.model-$(MODEL)
	for s in $(CONF_SETS); do $(NLQO) bench --questions $(BENCH_DATA)/$$s.jsonl.gz --corpus $(BENCH_DATA)/$${s}_corpus.jsonl.gz \
		--out $(CONF_OUT)/$$s --model $(MODEL) --strategies retrieve,linear --limit $(CONF_LINEAR) || exit 1; done
	for s in $(CONF_SETS); do $(NLQO) bench --questions $(BENCH_DATA)/$$s.jsonl.gz --corpus $(BENCH_DATA)/$${s}_corpus.jsonl.gz \
		--out $(CONF_OUT)/$$s --model $(MODEL) --strategies retrieve --limit $(CONF_LIMIT) || exit 1; done
	$(PY) scripts/confidence.py --bundle

# Issue 54's side-by-side run (docs/models.md, "Seconds per answer"): today's configuration against the
# reuse and compression settings, interleaved in one run per set on its first SECONDS_LIMIT questions;
# python scripts/seconds_report.py writes the table. Hours of CPU for the whole of it; resumable.
SECONDS_SETS ?= $(BENCH_SETS)
SECONDS_LIMIT ?= 100
SECONDS_STRATEGIES ?= standard-rag,standard-rag[compress=2],iter-retgen,iterate[stable_rounds=on],iterate[stable_rounds=on,compress=2]
SECONDS_OUT ?= benchmarks/results/seconds
bench-seconds: install $(VENV)/.model-$(MODEL)
	for s in $(SECONDS_SETS); do $(NLQO) bench --questions $(BENCH_DATA)/$$s.jsonl.gz --corpus $(BENCH_DATA)/$${s}_corpus.jsonl.gz \
		--out $(SECONDS_OUT)/$$s --model $(MODEL) --limit $(SECONDS_LIMIT) --strategies '$(SECONDS_STRATEGIES)' || exit 1; done

# Issue 50's out-of-the-box check (docs/statistics.md): auto with the bundled statistics on each set's
# held-back questions (after the calibration sample's first 50), interleaved with iter-retgen so their
# seconds compare, and with standard-rag on StrategyQA (the benchmark of record has the other sets').
# Grown a stage at a time over every set, so a stopped run has all sets on the same questions; resumable.
HELDOUT_SETS ?= $(BENCH_SETS)
HELDOUT_STAGES ?= 75 100 150 200
HELDOUT_OUT ?= benchmarks/results/auto-heldout
auto-heldout: install $(VENV)/.model-$(MODEL)
	for n in $(HELDOUT_STAGES); do for s in $(HELDOUT_SETS); do \
		$(NLQO) bench --questions $(BENCH_DATA)/$$s.jsonl.gz --corpus $(BENCH_DATA)/$${s}_corpus.jsonl.gz --skip $(STAT_SAMPLE) \
			--limit $$n --out $(HELDOUT_OUT)/$$s --model $(MODEL) \
			--strategies auto,iter-retgen$$([ $$s = strategyqa_229 ] && echo ,standard-rag) || exit 1; \
	done; done

# Issue 50's calibration check of the operators auto escalates to (docs/statistics.md): the template and the
# tree, with the decoder's confidence, on each set's held-back questions (after the calibration sample's
# first 50); StrategyQA's come from its benchmark of record. Resumable; about 37 s a question for both.
# Table: python scripts/operator_auroc.py.
HELDOUT_OPS_SETS ?= hotpotqa_dev_199 2wiki_dev_300 musique_dev_200
HELDOUT_OPS_LIMIT ?= 100
HELDOUT_OPS_OUT ?= benchmarks/results/heldout-operators
heldout-operators: install $(VENV)/.model-$(MODEL)
	for s in $(HELDOUT_OPS_SETS); do $(NLQO) bench --questions $(BENCH_DATA)/$$s.jsonl.gz --corpus $(BENCH_DATA)/$${s}_corpus.jsonl.gz \
		--skip $(STAT_SAMPLE) --limit $(HELDOUT_OPS_LIMIT) --out $(HELDOUT_OPS_OUT)/$$s --model $(MODEL) --strategies linear,tree || exit 1; done
	$(PY) scripts/operator_auroc.py

statistics-%: install $(VENV)/.model-$(MODEL)
	[ -f $(STAT_OUT)/$*/index/manifest.json ] || $(NLQO) index $(BENCH_DATA)/$*_corpus.jsonl.gz --out $(STAT_OUT)/$*/index
	$(NLQO) analyze --index $(STAT_OUT)/$*/index --questions $(BENCH_DATA)/$*.jsonl.gz --sample $(STAT_SAMPLE) --model $(MODEL) --records $(STAT_OUT)/$*/analyze --out $(STAT_OUT)/$*/statistics.json
	$(NLQO) bench --questions $(BENCH_DATA)/$*.jsonl.gz --index $(STAT_OUT)/$*/index --out $(STAT_OUT)/$*/heldout --model $(MODEL) --statistics $(STAT_OUT)/$*/statistics.json \
		--skip $(STAT_SAMPLE) --strategies auto,iter-retgen --limit $$(($(STAT_SAMPLE) + $(STAT_PAIRED)))
	$(NLQO) bench --questions $(BENCH_DATA)/$*.jsonl.gz --index $(STAT_OUT)/$*/index --out $(STAT_OUT)/$*/heldout --model $(MODEL) --statistics $(STAT_OUT)/$*/statistics.json \
		--skip $(STAT_SAMPLE) --strategies auto --limit $(BENCH_LIMIT)

# Issue 52's long fuzz campaign (docs/reliability.md, "Fuzz campaign"): every user-facing parser (IR, cost
# and rules files, statistics, the relation cache, the index manifest, question files, nlqo serve's HTTP
# bodies; the files also through the CLI) on FUZZ_INPUTS inputs drawn from its grammar, the shipped files
# mutated and raw bytes, by the property functions of tests/test_fuzz_parsers.py (tests/fuzzing.py). About
# 20 minutes on 2 cores; the counts go to benchmarks/results/fuzz.json and the table between
# docs/reliability.md's fuzz-campaign markers; it fails when any input ended in an internal error.
FUZZ_INPUTS ?= 100000
fuzz: install-test
	$(PY) scripts/fuzz.py --inputs $(FUZZ_INPUTS)

# Issue 42's mutation run (docs/testing.md): mutmut over the engine ([tool.mutmut] in pyproject.toml),
# then the report by group of modules between docs/testing.md's mutation-report markers. Hours of CPU
# on 2 cores; mutmut keeps its verdicts in mutants/ and re-tests only functions that changed, so a
# killed run resumes (MUTANTS="NAME..." tests only those, again); the verdicts are also kept in
# benchmarks/results/mutation/verdicts.json, each keyed on its function, its selected test files,
# tests/conftest.py and the pytest options: --restore puts back those whose key holds (issue 53).
# Not part of `make test` or CI (it does not fit CI's time).
MUTANTS ?=
mutation: install-test
	$(PY) -m pip install --quiet mutmut==3.8.1
	$(PY) scripts/mutation_report.py --restore
	start=$$(date +%s); $(VENV)/bin/mutmut run --max-children 2 $(MUTANTS); \
	$(PY) scripts/mutation_report.py --save --seconds $$(( $$(date +%s) - start )) --docs docs/testing.md

# After new tests: test the survivors again (mutmut re-tests a mutant with a verdict only when named;
# the names are read after --restore, where the recipe line runs).
mutation-survivors:
	$(MAKE) mutation MUTANTS='$$$$($(PY) scripts/mutation_report.py --survivor-names)'
