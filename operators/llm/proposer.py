"""LLM mutation, crossover and seeding: requests in, screened candidate sources out.

Two ways in. ``start(request)`` sends one request and returns at once with
a ``Ticket``; ``finish(ticket)`` waits for its reply (``wait`` tells which
tickets are done) and turns it into a ``Proposal``. The search loop works
this way, so that evaluators never wait for a model: it starts requests
when it plans children and takes each proposal when it lands. ``propose``
is the batch form: start them all, take each as it lands.

Behind both, requests run on an asyncio loop in a thread of the proposer
(at most ``settings.concurrency`` at once). A reply is stored in the cache,
on the caller's thread, when the caller takes it; replies that landed but
were not taken yet are stored when the proposer closes (a run stopped
mid-way keeps what it has paid for).

The budget counts what earlier sessions of the run spent (``spent_usd``)
and every paid reply. Once it is reached, no request is sent: the proposals
say "LLM budget exhausted" and ``exhausted`` is true, so the search carries
on with its parametric operators. Requests already in flight finish, so the
total can pass the limit by at most ``concurrency`` replies.

Example::

    with LlmProposer(settings, store, context, spent_usd=store.llm_usage().cost_usd) as proposer:
        ticket = proposer.start(Request(LLM_MUTATION, (parent,), Focus.MEMORY, sample=7))
        ...  # evaluate something meanwhile
        proposal = proposer.finish(ticket)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import re
import threading
from collections.abc import Iterable, Sequence

from operators.edits import extract_code, strip_reasoning
from operators.llm import client
from operators.llm.prompt import build_messages
from operators.llm.request import LlmSettings, ProblemContext, Proposal, Request, ResponseCache, Usage

log = logging.getLogger(__name__)

BUDGET_EXHAUSTED = "LLM budget exhausted"
#: Part of every cache key: bump it when the same key could mean a different reply.
CACHE_KEY_VERSION = 1
#: The longest explanation kept with a child (the prose before its code).
EXPLANATION_CHARS = 400
_CODE_START = re.compile(r"^(```|~~~|<<<<<<< SEARCH)", re.MULTILINE)


@dataclasses.dataclass(eq=False)
class Ticket:
    """A request that ``LlmProposer.start`` sent (or answered at once): which model got which messages."""

    request: Request
    model: str
    messages: list[dict[str, str]]
    key: str
    future: concurrent.futures.Future[client.Reply] | None = None  # the request on the wire
    proposal: Proposal | None = None  # the answer, once taken (or known without a request)
    repeat: bool = False  # the same question as a ticket in flight: it shares that one's reply

    @property
    def done(self) -> bool:
        """True when ``finish`` returns without waiting."""
        return self.proposal is not None or (self.future is not None and self.future.done())


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
        self._flying: dict[str, concurrent.futures.Future[client.Reply]] = {}  # key -> its request
        self._open: list[Ticket] = []  # tickets sent and not taken yet
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
        """True once the budget (``max_cost_usd``) is spent: no more requests are sent."""
        return self.settings.max_cost_usd is not None and self._spent >= self.settings.max_cost_usd

    def start(self, request: Request) -> Ticket:
        """Send ``request`` (unless the cache or the budget answers it at once); ``finish`` takes the answer."""
        ticket = self._ticket(request)
        if ticket.key in self._flying:  # the same question is on the wire: share its reply
            ticket.future, ticket.repeat = self._flying[ticket.key], True
        elif (cached := self._cache.get_llm_response(ticket.key) if self._cache is not None else None) is not None:
            ticket.proposal = self._proposal(ticket, cached, Usage(cached=True))
        elif self.exhausted:
            self._tell_exhausted()
            ticket.proposal = self._refusal(ticket, BUDGET_EXHAUSTED, model="")
        else:
            ticket.future = asyncio.run_coroutine_threadsafe(self._ask(ticket), self._loop)
            self._flying[ticket.key] = ticket.future
        if ticket.proposal is None:
            self._open.append(ticket)
        return ticket

    def finish(self, ticket: Ticket) -> Proposal:
        """The proposal for ``ticket``, waiting for its reply if need be (``LlmSetupError`` if the model cannot
        be used at all)."""
        if ticket.proposal is not None:
            return ticket.proposal
        assert ticket.future is not None
        reply = ticket.future.result()
        if self._flying.get(ticket.key) is ticket.future:
            del self._flying[ticket.key]
        self._open.remove(ticket)
        if ticket.repeat:  # the same, already paid reply
            ticket.proposal = (self._refusal(ticket, reply.reason) if reply.text is None
                               else self._proposal(ticket, reply.text, Usage(cached=True)))
        else:
            ticket.proposal = self._answer(ticket, reply)
        return ticket.proposal

    def wait(self, tickets: Iterable[Ticket], timeout: float | None = None) -> list[Ticket]:
        """Those of ``tickets`` that are done, waiting up to ``timeout`` seconds (None: for ever) for one."""
        tickets = list(tickets)
        if not any(t.done for t in tickets):
            futures = {t.future for t in tickets if t.future is not None}
            if futures:
                concurrent.futures.wait(futures, timeout, return_when=concurrent.futures.FIRST_COMPLETED)
        return [t for t in tickets if t.done]

    def propose(self, requests: Sequence[Request]) -> list[Proposal]:
        """One proposal per request, in order; each carries a screened source or a reason."""
        tickets = [self.start(r) for r in requests]
        try:
            first = {t.future: t for t in tickets if t.future is not None and not t.repeat}
            for future in concurrent.futures.as_completed(first):
                self.finish(first[future])  # each reply stored as it lands
            return [self.finish(t) for t in tickets]
        except BaseException:
            for ticket in tickets:  # LlmSetupError, or the caller interrupted: send nothing more
                if ticket.future is not None:
                    ticket.future.cancel()
            raise

    def close(self) -> None:
        """Keep the replies that landed and were not taken; cancel the requests still in flight; stop the thread."""
        if self._loop.is_closed():
            return
        for ticket in list(self._open):
            future = ticket.future
            if future is not None and future.done() and not future.cancelled() and future.exception() is None:
                reply = future.result()
                if reply.text is not None and not ticket.repeat and self._cache is not None:
                    self._cache.put_llm_response(ticket.key, ticket.model, reply.text, _usage(reply))
        self._open.clear()
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> "LlmProposer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one request ----------------------------------------------------------

    def _ticket(self, request: Request) -> Ticket:
        model = self._model_for(request)
        messages = build_messages(request, self.context)
        return Ticket(request, model, messages, cache_key(model, messages, request.sample, self.settings))

    def _model_for(self, request: Request) -> str:
        """The request's own model; else one drawn by weight from a hash of the request, so a resume draws the same."""
        models = list(self.settings.models)
        if request.model is not None:
            if request.model not in self.settings.models:
                raise ValueError(f"request for model {request.model!r}, which is not one of {models}")
            return request.model
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

    async def _ask(self, ticket: Ticket) -> client.Reply:
        async with self._limit:
            if self.exhausted:
                return client.Reply(None, reason=BUDGET_EXHAUSTED)
            reply = await client.complete(ticket.model, ticket.messages, self.settings)
            self._spent += reply.cost_usd  # on the loop's thread only, between awaits
            return reply

    def _answer(self, ticket: Ticket, reply: client.Reply) -> Proposal:
        if reply.text is None:
            if reply.reason == BUDGET_EXHAUSTED:
                self._tell_exhausted()
                return self._refusal(ticket, BUDGET_EXHAUSTED, model="")
            return self._refusal(ticket, reply.reason)
        if self._cache is not None:
            self._cache.put_llm_response(ticket.key, ticket.model, reply.text, _usage(reply))
        if not reply.cost_known and ticket.model not in self._unpriced:
            self._unpriced.add(ticket.model)
            level = logging.WARNING if self.settings.max_cost_usd is not None else logging.INFO
            log.log(level, "litellm has no price for %s: its replies count as $0 toward llm.max_cost_usd; "
                    "set llm.prices to count them", ticket.model)
        proposal = self._proposal(ticket, reply.text, Usage(reply.prompt_tokens, reply.completion_tokens,
                                                             reply.cost_usd))
        if proposal.source is None and reply.finish_reason == "length":
            proposal = dataclasses.replace(
                proposal, reason=f"{proposal.reason} (the reply was cut off at llm.max_tokens = "
                                 f"{client.max_tokens_for(ticket.model, self.settings)})")
        if self.exhausted:
            self._tell_exhausted()
        return proposal

    def _proposal(self, ticket: Ticket, text: str, usage: Usage) -> Proposal:
        """The source a reply yields once extracted and screened, or why it yields none."""
        request = ticket.request
        base = request.base
        extracted = extract_code(text, base)
        reason = extracted.reason
        if extracted.source is not None:
            reason = _refusal_reason(self.context.screen(extracted.source))
            if reason is None and base is not None and extracted.source.strip() == base.strip():
                reason = "the reply repeats the parent unchanged"
        source = extracted.source if not reason else None
        return Proposal(source, request.kind, ticket.model, tuple(p.id for p in request.parents), request.focus,
                        reason or "", extracted.form, usage, explanation(text), repairable=source is None,
                        draft=extracted.source if source is None else None,
                        reply=strip_reasoning(text).strip() if source is None else "")

    def _refusal(self, ticket: Ticket, reason: str, model: str | None = None) -> Proposal:
        request = ticket.request
        return Proposal(None, request.kind, ticket.model if model is None else model,
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


def explanation(reply: str) -> str:
    """The model's own words on its idea: the prose of ``reply`` before its code, on one line, cut short.

    >>> explanation("<think>hmm</think>Vectorised loads, and one pass.\\n```python\\nx = 1\\n```")
    'Vectorised loads, and one pass.'
    """
    answer = strip_reasoning(reply)
    found = _CODE_START.search(answer)
    prose = " ".join((answer[:found.start()] if found else "").split())
    return prose if len(prose) <= EXPLANATION_CHARS else prose[:EXPLANATION_CHARS - 4] + " ..."


def _usage(reply: client.Reply) -> dict[str, object]:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "cost_usd": reply.cost_usd, "finish_reason": reply.finish_reason}


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
