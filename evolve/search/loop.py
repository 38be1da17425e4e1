"""The search loop: select → vary → evaluate only the new → store → stop?

Generation 0 evaluates the seeds (or, for a problem without any, the first
kernels an LLM writes); every island starts from the accepted ones. Each later
generation: tournaments pick each island's parents, the parents not profiled
yet are profiled, variation makes unseen children (the parents' bottleneck
classes steer the operators; an LLM child is asked for and made when its
reply lands), the dispatcher evaluates them (each result is committed as it
arrives, and the steering learns whether it improved on its parent), and the
elite plus tournaments over parents and accepted children form the next
population; islands trade their best along a ring now and then.

Generations overlap so that no evaluator waits for a straggler or for an
LLM: a generation closes as soon as the dispatcher has a free slot (fewer
candidates in flight than its ``capacity``) and the LLM has room for the next
generation's requests (fewer than ``llm.concurrency`` waiting), and what is
still in flight (``evolve.search.flight``) joins the population of a later
generation when it lands. With one slot (the in-process dispatcher) every
generation waits for all of its results, but not for all of its LLM replies.

A checkpoint (the ``loop`` state: random state, populations, candidates in
flight, counters, what the operator selector learnt, the LLM's request
counter and its requests in flight) is stored after every generation;
parents' profiles and LLM replies are stored as they come. A resumed run evaluates again what was in flight and
replays the generation that was cut short from that checkpoint: the same
random state, profiles and cached replies draw the same children, whose rows
are already in the store, so only those still pending are evaluated. Nothing
committed is evaluated twice, and the run ends at its budget.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from evolve.config import Baseline, Config
from evolve.dispatch.base import Dispatcher
from evolve.search.asking import Ask, LlmOperators, Proposes
from evolve.search.flight import Flight
from evolve.search.history import History
from evolve.search.ledger import Ledger
from evolve.search.confirm import GPU_PLATFORMS, NO_INCUMBENT, confirm_top, rounds_for
from evolve.search.population import Candidate, faster, migrate, select_parents, survivors
from evolve.search.steering import ParentProfiles, Steering
from evolve.search.variation import Breeder, Child, llm_seed_children, seed_children, seed_space
from fitness import Incumbent, Status
from population_store import ACCEPTED, RunStore

log = logging.getLogger(__name__)

STATE_KEY = "loop"
AT_SOL = "at the speed of light"  # the stop reason of search.stop_at_sol (a sweep reads it)
INCUMBENT_EVENT = "incumbent"  # torch.compile's record, where a stop is set against it (search.speedup_over)
INCUMBENT_KEY = -(1 << 40)  # its dispatcher key: no individual's, no confirm round's


class SearchError(Exception):
    """The search cannot go on for a reason the user can fix (no seed is accepted)."""


@dataclasses.dataclass
class LoopState:
    """Everything the loop needs to go on after its last finished generation."""

    generation: int = -1  # last finished generation; -1 until the seeds are evaluated
    rng_state: list | None = None  # random.Random.getstate(), as JSON
    islands: list[list[int]] = dataclasses.field(default_factory=list)  # individual ids
    last_id: int = 0  # every individual up to this id belongs to a finished generation
    evaluations: int = 0  # individuals stored at the end of that generation
    best_ms: float | None = None
    best_speedup: float | None = None
    best_spread: float | None = None  # of best_ms: a kernel replaces it only when faster beyond noise
    best_sol: float | None = None  # its speed of light (None: no floor, or it read below the floor)
    compile_ms: float | None = None  # torch.compile's time, timed once where a stop is set against it
    stale: int = 0  # generations since best_ms last improved (and, set against torch.compile, beat it)
    elapsed_s: float = 0.0  # wall time spent searching, over all sessions
    in_flight: list[int] = dataclasses.field(default_factory=list)  # ids submitted, result not yet in
    selector: dict | None = None  # what the operator selector learnt (OperatorSelector.state())
    outcomes: dict[str, list] = dataclasses.field(default_factory=dict)  # child id -> what to learn from it
    llm_samples: int = 0  # LLM requests made so far: the next one's sample number
    llm_exhausted: bool = False  # the LLM budget was spent: no LLM operator is chosen
    llm_asks: list[dict] = dataclasses.field(default_factory=list)  # LLM requests whose replies were not taken


@dataclasses.dataclass
class Search:
    """What the loop works with, besides its state."""

    store: RunStore
    dispatcher: Dispatcher
    config: Config
    seeds: list[str]
    space: dict[str, tuple[int, ...]]  # resolved once from the seeds
    on_result: Callable[[Candidate], None] = lambda candidate: None
    proposer: Proposes | None = None  # the LLM operators' (None: no LLM)
    # No seeds: resolves (and keeps) the space from the accepted first kernels the LLM wrote.
    on_llm_seeds: Callable[[list[str]], dict[str, tuple[int, ...]]] | None = None


def run_search(search: Search) -> str:
    """Run, or continue, the search until a stop condition holds; return the reason."""
    run = _Run.begin(search)
    if run.state.generation < 0 and not _evaluate_seeds(run):
        return _seeds_cut_short(run.store, run.state, run.clock, run.flight)
    if search.config.search.speedup_over is Baseline.COMPILE and run.state.compile_ms is None:
        run.state.compile_ms = _incumbent_ms(search)  # before anything else is in flight
    islands = [[Candidate.from_individual(run.store.get(i)) for i in ids] for ids in run.state.islands]
    run.flight.resume(run.state.in_flight)
    run.reserve_s = _confirm_reserve(run)
    while not (reason := stop_reason(run.state, search.config, run.clock.elapsed() + run.reserve_s)):
        islands, exhausted = _generation(run, islands)
        if exhausted:
            reason = "no unseen candidate is left near the population (the search space is exhausted)"
            break
    not_evaluated = _last_results(run, islands) if run.flight.busy else []
    if not_evaluated:  # the budget was spent, but the wall limit ended the run
        reason = (f"max_wall_time_s reached ({run.clock.elapsed() + run.reserve_s:.0f} s) before the last "
                  f"evaluations ({reason})")
    # the top kernels timed again beside torch.compile, in what the search left of the wall limit (its
    # reserve; none for a session that started past the limit)
    cfg = search.config.search
    if not run.clock.past(run.deadline) and (cfg.max_wall_time_s is None or run.deadline is not None):
        confirm_top(run.store, search.dispatcher, cfg.confirm_rounds, run.deadline)
    run.store.record_event("stopped", {"reason": reason, "generation": run.state.generation,
                                       "evaluations": run.state.evaluations, "not_evaluated": not_evaluated,
                                       "confinement": _confinements(run.store)})
    return reason


@dataclasses.dataclass
class _Run:
    """One session of the loop: its search, its state as stored, and what works on them."""

    search: Search
    state: LoopState
    rng: random.Random
    clock: "_Clock"
    deadline: float | None
    ledger: Ledger
    breeder: Breeder
    flight: Flight
    reserve_s: float = 0.0  # of the wall limit, kept for the end-of-run rounds (``_confirm_reserve``)

    @property
    def search_deadline(self) -> float | None:
        """When the search stops waiting for results: the wall limit less the rounds' reserve."""
        return None if self.deadline is None else self.deadline - self.reserve_s

    @classmethod
    def begin(cls, search: Search) -> "_Run":
        cfg = search.config.search
        state, rng = _restore(search.store, cfg.seed)
        clock = _Clock(state.elapsed_s)
        ledger = Ledger(search.store, state.last_id)
        breeder = _breeder(search, state, rng)
        flight = Flight(search.dispatcher, search.store, ledger, breeder, cfg.max_evaluations, search.on_result)
        return cls(search, state, rng, clock, clock.deadline(cfg.max_wall_time_s), ledger, breeder, flight)

    @property
    def store(self) -> RunStore:
        return self.search.store

    def checkpoint(self, generation: int) -> None:
        _checkpoint(self.store, self.state, generation, self.rng, self.ledger, self.clock, self.flight, self.breeder)

    def land(self, islands: list[list[Candidate]], generation: int,
             stale: bool) -> tuple[list[list[Candidate]], list[Candidate]]:
        """What landed since the last call, learnt from, noted and into the populations: (the next
        populations, what landed)."""
        landed = self.flight.landed()
        self.breeder.steering.learn(landed)
        self.breeder.history.note(landed)
        return _close(islands, landed, self.state, self.search.config.search, self.rng, generation, stale), landed


#: The share of the wall limit the search leaves to the end-of-run rounds (the clean figures against
#: torch.compile), where they are on; at most ``CONFIRM_RESERVE_MAX_S``.
CONFIRM_RESERVE = 0.2
CONFIRM_RESERVE_MAX_S = 120.0


def _confirm_reserve(run: _Run) -> float:
    """Seconds of the wall limit kept for the end-of-run rounds: a run that searches to its limit still
    times its best against torch.compile (0 without a limit, or where the platform's rounds are off)."""
    limit, top = run.search.config.search.max_wall_time_s, run.store.best(1)
    platform = (top[0].result or {}).get("platform", "") if top else ""
    if limit is None or not top or rounds_for(run.search.config.search.confirm_rounds, platform) <= 0:
        return 0.0
    return min(CONFIRM_RESERVE * limit, CONFIRM_RESERVE_MAX_S)


def _evaluate_seeds(run: _Run) -> bool:
    """Generation 0: the seeds (or the LLM's first kernels) evaluated, every island started from the
    accepted ones; False where the wall limit came first (a resume evaluates the rest)."""
    search, cfg = run.search, run.search.config.search
    children, failures = _seed_children(search, run.breeder)
    seeds = [run.ledger.admit(child, 0, 0) for child in children if run.ledger.is_new(child)]
    run.flight.submit(seeds)
    run.flight.take(until=0, deadline=run.deadline)
    if run.flight.outstanding:
        return False
    accepted = _accepted_seeds(seeds, failures, llm=not search.seeds)
    if not search.seeds:  # the LLM wrote them: the space comes from those accepted
        settle = search.on_llm_seeds or (lambda sources: seed_space(sources, search.config.operators.space))
        search.space = run.breeder.space = settle([c.source for c in accepted])
    run.state.islands = [[c.id for c in accepted]] * cfg.islands
    seeded = run.flight.landed()
    run.breeder.history.note(seeded)
    _note_progress(run.state, seeded)
    run.checkpoint(0)
    return True


def _generation(run: _Run, islands: list[list[Candidate]]) -> tuple[list[list[Candidate]], bool]:
    """One generation: select, vary, evaluate only the new, take what lands, close; and whether the
    search space is exhausted (nothing new made, nothing landed, nothing in flight)."""
    search, cfg, breeder, flight = run.search, run.search.config.search, run.breeder, run.flight
    generation = flight.generation = run.state.generation + 1
    shares = _shares(run.state, search.config, breeder.llm.waiting if breeder.llm is not None else 0)
    parents = [select_parents(population, 2 * count, cfg.tournament_size, run.rng)
               for population, count in zip(islands, shares)]
    children = breeder.vary(parents, shares, run.ledger.seen, generation)
    offspring = [[run.ledger.admit(child, generation, island) for child in kids]
                 for island, kids in enumerate(children)]
    breeder.expect(zip([c for kids in offspring for c in kids], [c for kids in children for c in kids]))
    flight.submit([c for kids in offspring for c in kids])
    made = any(offspring) or breeder.asked > 0
    if not made:
        # Nothing new near the population as it stands (early on, a lone
        # seed's neighbourhood is soon bred out): wait for the next result
        # (or LLM reply), which may change that, not for all in flight while
        # slots go idle. Such a round is no generation: it counts for
        # neither patience nor max_generations.
        flight.take_one(deadline=run.search_deadline)
        generation = flight.generation = run.state.generation
    else:
        flight.take(until=max(0, search.dispatcher.capacity - 1), deadline=run.search_deadline)  # in flight at the close
    flight.submit(run.ledger.leftovers())  # after the replies a replayed generation takes, which make rows too
    islands, landed = run.land(islands, generation, stale=made)
    run.checkpoint(generation)
    return islands, not made and not landed and not flight.busy and not run.clock.past(run.search_deadline)


def _last_results(run: _Run, islands: list[list[Candidate]]) -> list[int]:
    """The budget is spent: the last results (and replies) waited for, up to the wall limit; the ids
    left pending past it (in flight for a resume)."""
    run.flight.take(until=0, deadline=run.search_deadline, asks_until=0)
    run.land(islands, run.state.generation, stale=False)
    not_evaluated = run.flight.cancel()
    run.checkpoint(run.state.generation)
    return not_evaluated


def _close(islands: list[list[Candidate]], landed: list[Candidate], state: LoopState, cfg: Any,
           rng: random.Random, generation: int, stale: bool = True) -> list[list[Candidate]]:
    """The next populations: each island's survivors among its population and the results that landed."""
    arrivals: list[list[Candidate]] = [[] for _ in islands]
    for c in sorted(landed, key=lambda c: c.id):  # the order of arrival must not matter
        if c.accepted:
            arrivals[c.island % len(islands)].append(c)
    islands = [survivors(population + kids, cfg.population_size, cfg.elite, cfg.tournament_size, rng)
               for population, kids in zip(islands, arrivals)]
    # a generation that closed before any result landed (a pool filling up) learnt nothing
    stale = stale and bool(landed)
    if stale and generation % cfg.migration_interval == 0:
        migrate(islands, cfg.migrants)
    state.islands = [[c.id for c in population] for population in islands]
    _note_progress(state, landed, count_stale=stale)
    return islands


def stop_reason(state: LoopState, config: Config, elapsed_s: float) -> str | None:
    """Why the search should stop now, or None."""
    cfg = config.search
    if state.evaluations >= cfg.max_evaluations:
        return f"max_evaluations reached ({cfg.max_evaluations})"
    over_compile = cfg.speedup_over is Baseline.COMPILE
    speedup = (state.compile_ms / state.best_ms if state.compile_ms and state.best_ms else None) if over_compile \
        else state.best_speedup
    if cfg.target_speedup is not None and (speedup or 0) >= cfg.target_speedup:
        return (f"target_speedup reached ({speedup:.3g}x >= {cfg.target_speedup:g}x"
                + (" over torch.compile)" if over_compile else ")"))
    if cfg.stop_at_sol is not None and (state.best_sol or 0) >= cfg.stop_at_sol:
        return f"{AT_SOL} (SOL {state.best_sol:.2f} >= {cfg.stop_at_sol:g})"
    if cfg.max_generations is not None and state.generation >= cfg.max_generations:
        return f"max_generations reached ({cfg.max_generations})"
    if cfg.patience is not None and state.stale >= cfg.patience:
        beaten = over_compile and state.compile_ms and state.best_ms and state.best_ms < state.compile_ms
        return (f"no kernel faster than torch.compile for {state.stale} generations (patience {cfg.patience})"
                if over_compile and not beaten else
                f"no faster kernel for {state.stale} generations (patience {cfg.patience})")
    if cfg.max_wall_time_s is not None and elapsed_s >= cfg.max_wall_time_s:
        return f"max_wall_time_s reached ({elapsed_s:.0f} s)"
    return None


# --- helpers ----------------------------------------------------------------------


class _Clock:
    def __init__(self, elapsed_before: float) -> None:
        self.before, self.started = elapsed_before, time.monotonic()

    def elapsed(self) -> float:
        return self.before + time.monotonic() - self.started

    def deadline(self, limit_s: float | None) -> float | None:
        """When (``time.monotonic``) ``limit_s`` of search time is reached; None without a limit, or
        for a session that starts past it: that one evaluates what was left in flight, and stops."""
        if limit_s is None or self.before >= limit_s:
            return None
        return self.started + limit_s - self.before

    def past(self, deadline: float | None) -> bool:
        return deadline is not None and time.monotonic() >= deadline


def _restore(store: RunStore, seed: int) -> tuple[LoopState, random.Random]:
    stored = store.get_state(STATE_KEY)
    state = LoopState(**stored) if stored else LoopState()
    rng = random.Random(seed)
    if state.rng_state is not None:
        version, internal, gauss = state.rng_state
        rng.setstate((version, tuple(internal), gauss))
    return state, rng


def _checkpoint(store: RunStore, state: LoopState, generation: int, rng: random.Random,
                ledger: Ledger, clock: _Clock, flight: Flight, breeder: Breeder) -> None:
    state.generation, state.rng_state = generation, list(rng.getstate())
    if breeder.llm is not None:  # the models' cost per request, as the next generation draws them by
        breeder.steering.price({m: (u.requests, u.cost_usd) for m, u in store.llm_usage().by_model.items()})
        state.llm_samples, state.llm_exhausted = breeder.llm.samples, breeder.llm.exhausted
        state.llm_asks = breeder.llm.state()
    state.selector, state.outcomes = breeder.steering.state()
    state.in_flight = sorted(flight.outstanding)
    state.last_id, state.evaluations, state.elapsed_s = ledger.last_id, store.count(), clock.elapsed()
    store.put_state(STATE_KEY, dataclasses.asdict(state))


def _seeds_cut_short(store: RunStore, state: LoopState, clock: _Clock, flight: Flight) -> str:
    """The wall limit came before every seed was judged: stop, the rest left pending (a resume
    makes generation 0 again, its judged seeds from the store, and evaluates the rest)."""
    not_evaluated = flight.cancel()
    state.elapsed_s = clock.elapsed()
    store.put_state(STATE_KEY, dataclasses.asdict(state))
    reason = f"max_wall_time_s reached ({state.elapsed_s:.0f} s)"
    store.record_event("stopped", {"reason": reason, "generation": state.generation,
                                   "evaluations": store.count(), "not_evaluated": not_evaluated})
    return reason


def _breeder(search: Search, state: LoopState, rng: random.Random) -> Breeder:
    """Variation as the run left it: what the steering learnt, the LLM's requests (counter, budget,
    those in flight) and what the run had found."""
    operators, llm_cfg, llm = search.config.operators, search.config.llm, None
    models = (dict(llm_cfg.models) or {llm_cfg.model: 1.0}) if search.proposer is not None else None
    steering = Steering(operators, rng, state.selector, state.outcomes, models)
    if search.proposer is not None:
        llm = LlmOperators(search.proposer, search.store, llm_cfg.concurrency, llm_cfg.max_cost_usd,
                           state.llm_samples, state.llm_exhausted, [Ask.from_dict(a) for a in state.llm_asks])
    uses_llm = llm is not None and any(w > 0 for op, w in operators.weights.items() if op.needs_llm)
    profiles = ParentProfiles(search.store, search.dispatcher, needed=operators.bias or uses_llm,
                              max_device_share=search.config.profiler.max_device_share)
    history = History.from_store(search.store, state.last_id, state.in_flight, search.config.problem.dtype)
    return Breeder(rng, operators, search.space, steering, profiles, llm, history, llm_cfg.repair_turns)


def _seed_children(search: Search, breeder: Breeder) -> tuple[list[Child], list[str]]:
    """Generation 0: the seed files, or first kernels the LLM writes (and why requests gave none)."""
    if search.seeds:
        return seed_children(search.seeds), []
    if breeder.llm is None:
        raise SearchError("the problem has no seed kernels and no LLM is configured to write them "
                          "(name problem.seeds, or set llm.model)")
    return llm_seed_children(breeder.llm, search.config.llm.initial_seeds, search.config.problem.dtype)


def _accepted_seeds(seeds: list[Candidate], failures: list[str], llm: bool = False) -> list[Candidate]:
    accepted = [c for c in seeds if c.accepted]
    if not accepted:
        verdicts = [f"seed {c.id}: {c.result['status']}: {c.result['reason']}" for c in seeds]
        verdicts += [f"a reply gave no kernel: {reason}" for reason in failures]
        what = "none of the first kernels the LLM was asked for is accepted" if llm else "no seed kernel is accepted"
        raise SearchError(f"{what}, so there is nothing to evolve ({'; '.join(verdicts)})")
    return accepted


def _incumbent_ms(search: Search) -> float:
    """torch.compile's time, for a target set against it (``search.speedup_over: compile``): timed once a run
    through the dispatcher, with the device to itself (``fitness.Incumbent``), and recorded
    (``INCUMBENT_EVENT``); ``SearchError`` where there is none (the CPU platform, torch.compile failed)."""
    accepted = search.store.individuals(ACCEPTED)
    platform = (accepted[0].result or {}).get("platform", "") if accepted else ""
    if platform not in GPU_PLATFORMS:
        raise SearchError(f"search.speedup_over: compile cannot be met on platform {platform!r}: {NO_INCUMBENT}")
    search.dispatcher.submit(INCUMBENT_KEY, Incumbent())
    _, record = search.dispatcher.next_result()
    search.store.record_event(INCUMBENT_EVENT, record.to_dict())
    if record.status is not Status.ACCEPTED or not record.runtime_ms:
        raise SearchError(f"search.speedup_over: compile: torch.compile was not timed ({record.reason})")
    log.info("torch.compile runs %.4g ms (eager %.4g ms): target_speedup is against it", record.runtime_ms,
             record.reference_ms or float("nan"))
    return record.runtime_ms


def _shares(state: LoopState, config: Config, asked: int = 0) -> list[int]:
    """Children per island this generation: population_size each, within the budget left (``asked``:
    places waiting for an LLM reply)."""
    left = config.search.max_evaluations - state.evaluations - asked
    shares = []
    for _ in range(config.search.islands):
        shares.append(max(0, min(config.search.population_size, left)))
        left -= shares[-1]
    return shares


def _note_progress(state: LoopState, new: list[Candidate], count_stale: bool = True) -> None:
    """Track the best kernel so far (replaced only by one faster beyond noise,
    ``evolve.search.population.faster``) and how many generations it has stood."""
    best = min((c for c in new if c.accepted), key=lambda c: c.runtime_ms, default=None)
    improved = best is not None and faster(best.runtime_ms, best.spread, state.best_ms, state.best_spread)
    if improved:
        state.best_ms, state.best_speedup, state.best_spread = best.runtime_ms, best.speedup, best.spread
        # a kernel that read below the floor is flagged, not at the speed of light (fitness.judge.sol)
        record = best.result or {}
        state.best_sol = None if record.get("below_floor") else record.get("sol")
    # patience set against torch.compile (search.speedup_over): only a best faster than it is progress
    if improved and (state.compile_ms is None or state.best_ms < state.compile_ms):
        state.stale = 0
    elif state.generation >= 0 and count_stale:
        state.stale += 1


def _confinements(store: RunStore) -> list[str]:
    """What the OS held the run's workers to (``fitness.boundary.confine``), as their verdicts say: once per run."""
    return sorted({(i.result or {}).get("confinement") or "" for i in store.individuals()} - {""})
