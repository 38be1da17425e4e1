"""LLM mutation, crossover and seeding: requests in, screened candidate sources out.

``LlmProposer.propose`` is synchronous. Behind it, the requests not answered
by the cache run concurrently on an asyncio loop in a thread of the proposer
(at most ``settings.concurrency`` at once), and each reply is stored in the
cache, on the caller's thread, as soon as it lands: a run killed mid-batch
has paid for nothing it will pay for again.

The budget counts what earlier sessions of the run spent (``spent_usd``)
and every paid reply. Once it is reached, no request is sent: the proposals
say "LLM budget exhausted" and ``exhausted`` is true, so the search carries
on with its parametric operators. Requests already in flight finish, so the
total can pass the limit by at most ``concurrency`` replies.

Example::

    with LlmProposer(settings, store, context, spent_usd=store.llm_usage().cost_usd) as proposer:
        proposals = proposer.propose([Request(LLM_MUTATION, (parent,), Focus.MEMORY, sample=7)])
        children = [p.source for p in proposals if p.source is not None]
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import threading
from collections.abc import Sequence

from operators.edits import extract_code
from operators.llm import client
from operators.llm.prompt import build_messages
from operators.llm.request import LlmSettings, ProblemContext, Proposal, Request, ResponseCache, Usage

log = logging.getLogger(__name__)

BUDGET_EXHAUSTED = "LLM budget exhausted"
#: Part of every cache key: bump it when the same key could mean a different reply.
CACHE_KEY_VERSION = 1


@dataclasses.dataclass(frozen=True)
class _Call:
    """A request made concrete: which model gets which messages, under which cache key."""

    request: Request
    model: str
    messages: list[dict[str, str]]
    key: str


class LlmProposer:
    """Turns ``Request``s into ``Proposal``s through litellm; see the module docstring."""

    def __init__(self, settings: LlmSettings, cache: ResponseCache | None, context: ProblemContext,
                 spent_usd: float = 0.0):
        """Check the models and their keys (``LlmSetupError``) and start the request thread."""
        client.check_setup(settings)
        self.settings = settings
        self.context = context
        self._cache = cache
        self._spent = spent_usd
        self._unpriced: set[str] = set()
        self._told_exhausted = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kevo-llm", daemon=True)
        self._thread.start()
        self._limit = asyncio.Semaphore(settings.concurrency)  # binds to the loop that first waits on it

    @property
    def spent_usd(self) -> float:
        """What the run has paid for LLM replies, earlier sessions included."""
        return self._spent

    @property
    def exhausted(self) -> bool:
        """True once the budget (``max_cost_usd``) is spent: propose sends no more requests."""
        return self.settings.max_cost_usd is not None and self._spent >= self.settings.max_cost_usd

    def propose(self, requests: Sequence[Request]) -> list[Proposal]:
        """One proposal per request, in order; each carries a screened source or a reason."""
        calls = [self._call(r) for r in requests]
        proposals: list[Proposal | None] = [None] * len(calls)
        pending: dict[concurrent.futures.Future[client.Reply], list[int]] = {}
        asked: dict[str, concurrent.futures.Future[client.Reply]] = {}  # one request per key
        for index, call in enumerate(calls):
            if call.key in asked:
                pending[asked[call.key]].append(index)
                continue
            cached = self._cache.get_llm_response(call.key) if self._cache is not None else None
            if cached is not None:
                proposals[index] = self._proposal(call, cached, Usage(cached=True))
            else:
                asked[call.key] = asyncio.run_coroutine_threadsafe(self._ask(call), self._loop)
                pending[asked[call.key]] = [index]
        try:
            for future in concurrent.futures.as_completed(pending):
                first, *repeats = pending[future]
                answer = proposals[first] = self._answer(calls[first], future.result())
                for index in repeats:  # the same question again in this batch: the same, already paid reply
                    proposals[index] = self._repeat(calls[index], answer, future.result())
        except BaseException:
            for future in pending:  # LlmSetupError, or the caller interrupted: send nothing more
                future.cancel()
            raise
        return [p for p in proposals if p is not None]

    def close(self) -> None:
        """Stop the request thread; requests in flight are cancelled."""
        if self._loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> "LlmProposer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one request ----------------------------------------------------------

    def _call(self, request: Request) -> _Call:
        model = self._model_for(request)
        messages = build_messages(request, self.context)
        return _Call(request, model, messages, cache_key(model, messages, request.sample, self.settings))

    def _model_for(self, request: Request) -> str:
        """A model drawn by weight, but from a hash of the request, so a resumed run draws the same."""
        models = list(self.settings.models)
        if len(models) == 1:
            return models[0]
        identity = json.dumps([request.kind, [p.id for p in request.parents], request.focus.value, request.sample])
        draw = int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "big") / 2**64
        total = sum(self.settings.models.values())
        for model in models:
            draw -= self.settings.models[model] / total
            if draw < 0:
                return model
        return models[-1]

    async def _ask(self, call: _Call) -> client.Reply:
        async with self._limit:
            if self.exhausted:
                return client.Reply(None, reason=BUDGET_EXHAUSTED)
            reply = await client.complete(call.model, call.messages, self.settings)
            self._spent += reply.cost_usd  # on the loop's thread only, between awaits
            return reply

    def _answer(self, call: _Call, reply: client.Reply) -> Proposal:
        if reply.text is None:
            if reply.reason == BUDGET_EXHAUSTED:
                self._tell_exhausted()
                return self._refusal(call, BUDGET_EXHAUSTED, model="")
            return self._refusal(call, reply.reason)
        usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                 "cost_usd": reply.cost_usd, "finish_reason": reply.finish_reason}
        if self._cache is not None:
            self._cache.put_llm_response(call.key, call.model, reply.text, usage)
        if not reply.cost_known and call.model not in self._unpriced:
            self._unpriced.add(call.model)
            level = logging.WARNING if self.settings.max_cost_usd is not None else logging.INFO
            log.log(level, "litellm has no price for %s: its replies count as $0 toward llm.max_cost_usd; "
                    "set llm.prices to count them", call.model)
        proposal = self._proposal(call, reply.text, Usage(reply.prompt_tokens, reply.completion_tokens,
                                                           reply.cost_usd))
        if proposal.source is None and reply.finish_reason == "length":
            proposal = dataclasses.replace(
                proposal, reason=f"{proposal.reason} (the reply was cut off at llm.max_tokens = "
                                 f"{client.max_tokens_for(call.model, self.settings)})")
        if self.exhausted:
            self._tell_exhausted()
        return proposal

    def _repeat(self, call: _Call, first: Proposal, reply: client.Reply) -> Proposal:
        if reply.text is None:
            return self._refusal(call, first.reason, model=first.model)
        return self._proposal(call, reply.text, Usage(cached=True))

    def _proposal(self, call: _Call, text: str, usage: Usage) -> Proposal:
        """The source a reply yields once extracted and screened, or why it yields none."""
        request = call.request
        base = request.parents[0].source if request.parents else None
        extracted = extract_code(text, base)
        reason = extracted.reason
        if extracted.source is not None:
            reason = _refusal_reason(self.context.screen(extracted.source))
            if reason is None and base is not None and extracted.source.strip() == base.strip():
                reason = "the reply repeats the parent unchanged"
        source = extracted.source if not reason else None
        return Proposal(source, request.kind, call.model, tuple(p.id for p in request.parents), request.focus,
                        reason or "", extracted.form, usage)

    def _refusal(self, call: _Call, reason: str, model: str | None = None) -> Proposal:
        request = call.request
        return Proposal(None, request.kind, call.model if model is None else model,
                        tuple(p.id for p in request.parents), request.focus, reason)

    def _tell_exhausted(self) -> None:
        if not self._told_exhausted:
            self._told_exhausted = True
            log.warning("LLM budget reached: $%.4f spent of llm.max_cost_usd = $%.4f; no more LLM requests, "
                        "parametric operators go on", self._spent, self.settings.max_cost_usd)

    # -- the loop's thread ----------------------------------------------------

    async def _shutdown(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def cache_key(model: str, messages: list[dict[str, str]], sample: int, settings: LlmSettings) -> str:
    """The key of a reply: sha256 of everything that changes it (model, messages, sample, sampling settings)."""
    material = {"version": CACHE_KEY_VERSION, "model": model, "messages": messages, "sample": sample,
                "temperature": settings.temperature, "max_tokens": settings.max_tokens}
    if settings.reasoning_effort is not None:  # only when set: keys of runs from before it existed still match
        material["reasoning_effort"] = settings.reasoning_effort.value
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _refusal_reason(verdict: object) -> str | None:
    """The screen's verdict as a reason, or None when it lets the source through."""
    if verdict is None or verdict == "":
        return None
    if isinstance(verdict, str):
        return f"refused by the screen: {verdict}"
    if getattr(verdict, "ok", False):
        return None
    status = getattr(verdict, "status", "")
    return f"refused by the screen: {status + ': ' if status else ''}{getattr(verdict, 'reason', verdict)}"
