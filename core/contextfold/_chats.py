"""Long multi-session chats with planted facts: the test data of chat memory.

No public data set holds long personal-assistant chats with known facts and later
questions about them, so [`generate_chat`][contextfold.testing.generate_chat] writes them,
deterministically from a seed.
A chat is what an assistant sees over weeks of plain conversation (no tool calls)::

    [system prompt]
    [Session started: ...]          a user message with source "session", once per session
    small talk                      short exchanges
    tasks                           a request and a long answer (a draft, a plan, a list)
    facts                           mentioned in passing in the first sessions: names,
                                    dates, amounts, ids, preferences
    corrections                     some facts restated with a new value in middle sessions
    questions                       in the last sessions, one per fact: the model call
                                    that answers needs the fact's latest value

Every value is unique in its chat, and no value is a substring of another, so a fact is
"in the context" exactly when its value string is. A question never contains its answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Literal

from ._messages.model import Message

__all__ = ["GeneratedChat", "PlantedFact", "generate_chat"]

Kind = Literal["name", "date", "amount", "id", "preference"]


@dataclass(frozen=True)
class PlantedFact:
    """One fact the user mentioned, and what became of it."""

    key: str
    """What the fact is about, as the user says it ("dentist appointment date")."""
    kind: Kind
    """Its kind of value."""
    value: str
    """Its latest value: the answer to the question about it."""
    earlier: tuple[str, ...] = ()
    """Values it had before the user corrected it, oldest first."""
    planted_at: int = 0
    """Index of the user message that first mentioned it."""
    asked_at: int | None = None
    """Index of the assistant message that answers the question about it (the model call
    with the history ``messages[:asked_at]``), or ``None`` when it is never asked."""


@dataclass(frozen=True)
class GeneratedChat:
    """A generated chat and the facts planted in it."""

    messages: list[Message]
    """The conversation, system prompt first."""
    facts: tuple[PlantedFact, ...] = ()
    """Every planted fact, in the order they were planted."""

    @property
    def questions(self) -> dict[int, tuple[str, ...]]:
        """For each model call that answers a question (the assistant message's index),
        the values it needs."""
        asked: dict[int, list[str]] = {}
        for f in self.facts:
            if f.asked_at is not None:
                asked.setdefault(f.asked_at, []).append(f.value)
        return {n: tuple(v) for n, v in sorted(asked.items())}


# -- what can be said ------------------------------------------------------------------

_FACTS: tuple[tuple[str, Kind, str], ...] = (
    # key, kind, how the user first mentions it ({v} is the value)
    ("sister's name", "name", "My sister {v} is coming to stay for a week, so I may be slow "
     "to reply some evenings."),
    ("dentist appointment date", "date", "Note for later: my dentist appointment is on {v}."),
    ("kitchen renovation budget", "amount", "We finally agreed on {v} as the budget for the "
     "kitchen renovation."),
    ("library card number", "id", "My library card number is {v}, in case the renewal form "
     "asks for it."),
    ("favourite tea", "preference", "I've switched to {v} lately, it's my favourite tea now."),
    ("landlord's name", "name", "My landlord, {v}, finally answered about the boiler."),
    ("flight booking reference", "id", "The booking reference for the Lisbon flight is {v}."),
    ("car insurance renewal date", "date", "The car insurance renews on {v}, remind me to "
     "compare quotes before that."),
    ("monthly rent", "amount", "The rent goes up to {v} a month from spring, which stings."),
    ("gym locker code", "id", "I keep forgetting it, so: my gym locker code is {v}."),
    ("dog's name", "name", "We adopted a dog on Saturday! We named him {v}."),
    ("parcel tracking number", "id", "The tracking number for the bike parcel is {v}."),
    ("anniversary dinner date", "date", "Our anniversary dinner is booked for {v}."),
    ("laptop budget", "amount", "For the new laptop I don't want to spend more than {v}."),
    ("favourite cuisine", "preference", "Honestly {v} food is my favourite, I could eat it "
     "every week."),
    ("project codename", "preference", "At work the new project is called {v}, it's all "
     "anyone talks about."),
)

_NAMES = ("Marguerite", "Thaddeus", "Ottilie", "Leopoldo", "Wilhelmina", "Casimir",
          "Rosalind", "Evander", "Philippa", "Ignatius", "Seraphina", "Bartholomew",
          "Clementine", "Florentyna", "Anastasios", "Cornelius", "Hortensia", "Lysander")
_AMOUNTS = {"kitchen renovation budget": (4_000, 40_000), "monthly rent": (600, 4_000),
            "laptop budget": (700, 3_500)}  # dollars, least and most
_PREFERENCES = {
    "dog's name": ("Pemberton", "Juniper", "Waffles", "Biscotti", "Mortimer", "Pickles",
                   "Tofu"),
    "favourite tea": ("genmaicha", "hojicha", "rooibos", "lapsang souchong", "sencha",
                      "darjeeling", "yerba mate"),
    "favourite cuisine": ("Georgian", "Ethiopian", "Peruvian", "Burmese", "Sichuan",
                          "Oaxacan", "Sardinian"),
    "project codename": ("Bluefin", "Kestrel", "Marigold", "Tamarack", "Quicksilver",
                         "Driftwood", "Halcyon"),
}
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_ID_SHAPES = ("LLddddd", "LLL-dddd", "dddd-Ldd", "LdLdLd")  # L: a letter, d: a digit

_CORRECTIONS = (
    "Oh, a correction about my {key}: it's {new}, not {old}. I mixed it up.",
    "Small fix: I told you the wrong {key}. It's actually {new}.",
    "Update on the {key}: it changed to {new}.",
)
_QUESTIONS = (
    "Quick one: what was my {key} again?",
    "Remind me, what's my {key}?",
    "Do you remember my {key}? I need it now.",
    "Sorry to ask again, what did I say my {key} was?",
)
_PLACES = ("the park", "the market", "my aunt's", "the coast", "the old town", "the lake",
           "the climbing gym", "the bakery on the corner", "the cinema", "the museum")
_ACTIVITIES = ("went hiking", "baked bread", "watched a documentary", "repainted the hallway",
               "tried a new recipe", "cleaned out the garage", "played board games",
               "went to a concert", "fixed the bike", "read half a novel")
_MOODS = ("tired but happy", "a bit restless", "weirdly energetic", "pretty relaxed",
          "slightly overwhelmed", "in a good mood")
_SMALL_TALK = (
    "Morning! I {activity} yesterday and I'm feeling {mood} today.",
    "It's pouring here again, so I stayed in. I {activity} instead of going to {place}.",
    "Just got back from {place}. Busy day, I'm {mood}.",
    "Not much to report, I {activity} and then went to {place}.",
    "Do you ever get the feeling a week went by in a blink? I'm {mood}.",
    "We {activity} at the weekend and then walked to {place}. Lovely.",
)
_REPLIES = (
    "That sounds like a good way to spend the day. How are you feeling about the week ahead?",
    "Nice! A change of pace like that often helps. Anything planned for the evening?",
    "Glad to hear it. Rainy days are good for slow projects.",
    "It happens to everyone now and then. Be kind to yourself this week.",
    "Lovely. Those small outings add up to a good week.",
    "I hope you get some rest too. Let me know if there is anything I can help with.",
)
_ACKS = ("Got it, I'll keep that in mind.", "Noted!", "Thanks for letting me know.",
         "Okay, noted.")
_TASKS = (
    "Can you draft a short email to my manager asking to move our one-to-one to next week?",
    "Give me a packing list for a four-day trip to the mountains.",
    "Explain the difference between a fixed and a variable rate mortgage in plain words.",
    "Suggest three dinner ideas that use leeks and potatoes.",
    "Help me word a polite complaint about a late furniture delivery.",
    "What's a good weekly routine to get back into running after an injury?",
    "Write a short thank-you note for a neighbour who watered our plants.",
    "Summarise the pros and cons of leasing versus buying a car.",
    "Plan a relaxed Saturday in a city I don't know, with a museum and a long lunch.",
    "How should I prepare for a salary conversation with my boss?",
)
_ANSWER_SENTENCES = (
    "Start with the part that matters most to you and keep the rest flexible.",
    "A short, friendly opening sets the tone and makes the request easy to accept.",
    "It helps to write down two or three options before deciding.",
    "Keep it concrete: name the date, the place and what you need from the other person.",
    "Leave some slack in the plan, since the first attempt rarely goes exactly as intended.",
    "If anything is unclear, a quick follow-up question saves time later.",
    "Most people find it easier when the steps are small and the first one is obvious.",
    "Check the costs up front so there are no surprises at the end.",
    "A brief summary at the end makes the whole thing easier to act on.",
    "Give it a week and then look at what worked and what did not.",
    "Comfort matters more than speed, especially at the start.",
    "Writing it down once means you do not have to keep it all in your head.",
    "Ask for feedback early, while changes are still cheap.",
    "Pair each step with a time, otherwise it tends to slide.",
)


# -- building ----------------------------------------------------------------------------


@dataclass
class _Writer:
    rnd: random.Random
    out: list[Message] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    clock: datetime = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)
    prefix: str = "c"

    def add(self, role: Literal["system", "user", "assistant"], text: str,
            source: str | None = None) -> int:
        self.clock += timedelta(seconds=40 + self.rnd.randrange(200))
        self.out.append(Message(role=role, content=text, source=source,  # type: ignore[arg-type]
                                created_at=self.clock, id=f"{self.prefix}-{len(self.out)}"))
        return len(self.out) - 1

    def value(self, key: str, kind: Kind) -> str:
        """A fresh value: never used before in this chat, no substring of another."""
        for _ in range(1000):
            v = self._draw(key, kind)
            if not any(v in u or u in v for u in self.used):
                self.used.add(v)
                return v
        raise RuntimeError(f"ran out of values for {key!r}")  # pragma: no cover

    def _draw(self, key: str, kind: Kind) -> str:
        r = self.rnd
        if key in _PREFERENCES:
            return r.choice(_PREFERENCES[key])
        if kind == "name":
            return r.choice(_NAMES)
        if kind == "date":
            return f"{r.randint(1, 28)} {r.choice(_MONTHS)} {r.choice((2026, 2027))}"
        if kind == "amount":
            lo, hi = _AMOUNTS[key]
            return f"${r.randrange(lo, hi) // 10 * 10:,}"
        if kind == "id":
            return "".join(r.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") if c == "L" else
                           str(r.randrange(10)) if c == "d" else c
                           for c in r.choice(_ID_SHAPES))
        raise ValueError(f"no values for {key!r}")  # pragma: no cover - a table entry missing

    def small_talk(self) -> None:
        r = self.rnd
        self.add("user", r.choice(_SMALL_TALK).format(
            activity=r.choice(_ACTIVITIES), place=r.choice(_PLACES), mood=r.choice(_MOODS)))
        self.add("assistant", r.choice(_REPLIES))

    def task(self) -> None:
        r = self.rnd
        self.add("user", r.choice(_TASKS))
        paragraphs = []
        for _ in range(r.randint(1, 4)):
            paragraphs.append(" ".join(r.sample(_ANSWER_SENTENCES, r.randint(3, 7))))
        self.add("assistant", "\n\n".join(paragraphs))

    def session_marker(self, number: int) -> None:
        self.clock += timedelta(days=self.rnd.randint(1, 4))
        self.clock = self.clock.replace(hour=self.rnd.randint(7, 21), minute=0)
        self.add("user", f"[Session {number} started: {self.clock:%Y-%m-%d %H:%M} (UTC)]",
                 source="session")


def generate_chat(
    seed: int,
    *,
    sessions: int = 12,
    exchanges: tuple[int, int] = (10, 22),
    facts: int = 10,
    corrected: float = 0.4,
    task_share: float = 0.35,
) -> GeneratedChat:
    """A deterministic long multi-session chat built from ``seed``.

    Args:
        seed: the same seed and arguments give equal messages with equal ids.
        sessions: sessions in the chat (at least 3: facts are planted in the first
            ~30%, corrected in the middle, asked in the last ~25%).
        exchanges: the least and most user/assistant exchanges per session.
        facts: facts planted (at most 16); each is asked once.
        corrected: the share of facts the user corrects later (a few twice).
        task_share: the share of exchanges that are tasks with long answers (the rest
            is small talk).

    Raises:
        ValueError: an argument is out of range.
    """
    if sessions < 3 or not 1 <= exchanges[0] <= exchanges[1] or not 0 <= facts <= len(_FACTS):
        raise ValueError(f"need sessions >= 3, 1 <= exchanges[0] <= exchanges[1] and "
                         f"0 <= facts <= {len(_FACTS)}")
    if not 0 <= corrected <= 1 or not 0 <= task_share <= 1:
        raise ValueError("corrected and task_share are shares in [0, 1]")
    rnd = random.Random(seed)
    w = _Writer(rnd, prefix=f"chat{seed}")
    w.add("system", "You are a friendly personal assistant. Remember what the user tells "
                    "you and answer their questions.")
    chosen = rnd.sample(_FACTS, facts)
    values = {key: [w.value(key, kind)] for key, kind, _ in chosen}
    for key, kind, _ in chosen:
        if rnd.random() < corrected:
            values[key].append(w.value(key, kind))
            if rnd.random() < 0.25:
                values[key].append(w.value(key, kind))
    plant_end = max(1, round(sessions * 0.3))
    ask_start = sessions - max(1, round(sessions * 0.25))
    # Each event goes to a session: plants early, corrections in the middle, questions late.
    events: dict[int, list[tuple[str, str, int]]] = {}
    for key, _, _ in chosen:
        events.setdefault(rnd.randrange(plant_end), []).append(("plant", key, 0))
        at = plant_end
        for k in range(1, len(values[key])):  # each correction in or after the one before
            at = rnd.randrange(at, ask_start)
            events.setdefault(at, []).append(("correct", key, k))
        events.setdefault(rnd.randrange(ask_start, sessions), []).append(("ask", key, 0))
    templates = {key: text for key, _, text in chosen}
    planted: dict[str, int] = {}
    asked: dict[str, int] = {}
    for s in range(sessions):
        w.session_marker(s + 1)
        mine = sorted(events.get(s, []), key=lambda e: e[2])  # a second correction last
        n = max(rnd.randint(*exchanges), len(mine))
        slots = dict(zip(sorted(rnd.sample(range(n), len(mine))), mine, strict=True))
        for x in range(n):
            event = slots.get(x)
            if event is None and rnd.random() < task_share:
                w.task()
                continue
            if event is None:
                w.small_talk()
                continue
            what, key, k = event
            v = values[key]
            if what == "plant":
                planted[key] = w.add("user", templates[key].format(v=v[0]))
                w.add("assistant", rnd.choice((*_ACKS, f"Noted: {key}, {v[0]}.")))
            elif what == "correct":
                w.add("user", rnd.choice(_CORRECTIONS).format(key=key, new=v[k], old=v[k - 1]))
                w.add("assistant", rnd.choice((*_ACKS, f"Updated: {v[k]}.")))
            else:
                w.add("user", rnd.choice(_QUESTIONS).format(key=key))
                asked[key] = w.add("assistant", f"Your {key} is {v[-1]}.")
    found = tuple(
        PlantedFact(key=key, kind=kind, value=values[key][-1],
                    earlier=tuple(values[key][:-1]), planted_at=planted[key],
                    asked_at=asked[key])
        for key, kind, _ in sorted(chosen, key=lambda c: planted[c[0]])
    )
    return GeneratedChat(messages=w.out, facts=found)
