"""Customer-service runs in the style of tau-bench's airline domain, written from a seed.

Each record has tau-bench's shape (``task_id``, ``reward``, ``trial``, ``info.task`` with the
user id, the instruction and the gold ``actions``, and the conversation in ``traj``), so
the tools that read tau-bench read these too. A run follows the domain's usual course: the
agent asks for the user id, reads the user's profile and reservations (long JSON tool
results), searches flights, states the change and waits for a "yes", then acts. The values
the final actions need (reservation codes, flight numbers, dates, payment ids) first appear
early in the conversation.

Like the real traces, some runs reuse a tool call id across turns (the same id for two
different calls, each answered right after it).
"""

from __future__ import annotations

import json
import random
import string
from typing import Any

__all__ = ["POLICY", "airline_records"]

POLICY = """# Airline agent policy

The current time is 2024-05-15 15:00:00 EST.

You are a customer-service agent of a small airline. You can book, change and cancel
reservations, change baggage, and update passenger details, with the tools you are given.

## Before acting
- Authenticate the user first: ask for their user id and read their profile with
  get_user_details. Never act on a reservation that the profile does not list.
- Before any change to the booking database (booking, changing flights, baggage, cabin or
  passengers, cancelling), state the change in full (reservation code, flights with their
  numbers and dates, cabin, amount, payment method) and ask for an explicit "yes".
- Make one tool call at a time, and answer the user or call a tool, never both at once.
- Do not give information the tools did not give you, and do not make recommendations of
  your own. Transfer the user to a human agent only when the request cannot be handled
  within this policy.

## Booking
- A reservation has one trip type (one way or round trip), one cabin (basic economy,
  economy or business) and at most five passengers, each with first name, last name and
  date of birth.
- Payment: at most one travel certificate, at most one credit card and at most three gift
  cards per reservation. The remaining balance of a certificate is not refundable. Every
  payment method must already be in the user's profile.
- Checked bags: regular members get 0 free bags in basic economy, 1 in economy and 2 in
  business; silver members 1, 2 and 3; gold members 2, 3 and 3. Each extra bag is $50.
- Travel insurance costs $30 per passenger and makes a cancellation for health or weather
  reasons fully refundable.

## Changing flights
- Basic economy flights cannot be changed. Other reservations can change flights without
  changing the origin, destination or trip type; the cabin must be the same on every
  flight of the reservation.
- The price difference of a change is paid or refunded with a payment method from the
  profile. A gift card or certificate used for the difference must cover it whole.
- Flights that have already flown cannot be changed; a change applies to the flights that
  have not.

## Cancelling
- A reservation can be cancelled within 24 hours of booking, when the airline cancelled
  a flight, for business-cabin reservations, or with travel insurance for a covered
  reason. Otherwise explain that it cannot be cancelled, and offer a change instead.
- Refunds go back to the original payment methods within 5 to 7 business days.

## Compensation
- Offer a certificate only when the user complains about a cancelled or delayed flight
  and is a silver or gold member, has travel insurance, or flies business: $100 per
  passenger for a cancelled flight, $50 per passenger for a delay once the reservation
  is changed or cancelled. Never offer it unasked."""

_FIRST = ("sofia", "omar", "mei", "lucas", "aisha", "ivan", "noor", "mateo", "yuki", "amara",
          "liam", "chloe", "raj", "ingrid", "kwame", "elena")
_LAST = ("kim", "hassan", "zhang", "silva", "okafor", "petrov", "rahman", "garcia", "tanaka",
         "mensah", "murphy", "dubois", "patel", "larsen", "boateng", "rossi")
_AIRPORTS = ("JFK", "LAX", "ORD", "DFW", "DEN", "SFO", "SEA", "ATL", "BOS", "MIA", "PHX",
             "IAH", "MSP", "DTW", "CLT", "EWR", "LGA", "PHL", "MCO", "LAS")
_CITIES = {"JFK": "New York", "LAX": "Los Angeles", "ORD": "Chicago", "DFW": "Dallas",
           "DEN": "Denver", "SFO": "San Francisco", "SEA": "Seattle", "ATL": "Atlanta",
           "BOS": "Boston", "MIA": "Miami", "PHX": "Phoenix", "IAH": "Houston",
           "MSP": "Minneapolis", "DTW": "Detroit", "CLT": "Charlotte", "EWR": "Newark",
           "LGA": "New York", "PHL": "Philadelphia", "MCO": "Orlando", "LAS": "Las Vegas"}
_STREETS = ("Laurel Lane", "Cedar Avenue", "Hillcrest Drive", "Maple Street", "Elm Court",
            "River Road", "Oak Street", "Lakeview Drive")
_TOOL_NAMES = ("get_user_details", "get_reservation_details", "search_direct_flight",
               "update_reservation_flights", "update_reservation_baggages",
               "cancel_reservation", "book_reservation", "think")


class _Run:
    """One conversation being written: messages, call ids and the values it made up."""

    def __init__(self, rng: random.Random, reuse_ids: bool) -> None:
        self.rng = rng
        self.traj: list[dict[str, Any]] = [{"role": "system", "content": POLICY}]
        self.reuse_ids = reuse_ids
        self.first_id: str | None = None
        self.calls = 0

    def user(self, text: str) -> None:
        self.traj.append({"role": "user", "content": text})

    def agent(self, text: str) -> None:
        self.traj.append({"content": text, "role": "assistant"})

    def call(self, name: str, arguments: dict[str, Any], result: Any) -> None:
        self.calls += 1
        if self.reuse_ids and self.first_id is not None and self.calls == 5:
            call_id = self.first_id  # the id of the run's first call, used again
        else:
            call_id = "call_" + "".join(
                self.rng.choice(string.ascii_letters + string.digits) for _ in range(24))
        self.first_id = self.first_id or call_id
        self.traj.append({"content": None, "role": "assistant", "tool_calls": [{
            "function": {"arguments": json.dumps(arguments, separators=(",", ":")),
                         "name": name},
            "id": call_id, "type": "function"}]})
        content = result if isinstance(result, str) else json.dumps(result)
        self.traj.append({"role": "tool", "tool_call_id": call_id, "name": name,
                          "content": content})


class _World:
    """The made-up airline data one run reads: a user, their reservations, flights."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def unique(self, make: Any) -> str:
        while True:
            value = make()
            if value not in self.used:
                self.used.add(value)
                return str(value)

    def code(self) -> str:
        chars = string.ascii_uppercase + string.digits
        return self.unique(lambda: "".join(self.rng.choice(chars) for _ in range(6)))

    def flight_number(self) -> str:
        return self.unique(lambda: f"HAT{self.rng.randrange(1, 300):03d}")

    def payment(self, kind: str) -> str:
        return self.unique(lambda: f"{kind}_{self.rng.randrange(1_000_000, 9_999_999)}")

    def date(self, low: int = 16, high: int = 30) -> str:
        return f"2024-05-{self.rng.randrange(low, high + 1):02d}"

    def user(self) -> dict[str, Any]:
        rng = self.rng
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        user_id = self.unique(lambda: f"{first}_{last}_{rng.randrange(1000, 9999)}")
        methods: dict[str, dict[str, Any]] = {}
        for kind in ("credit_card", "gift_card", "gift_card", "certificate"):
            pid = self.payment(kind)
            method: dict[str, Any] = {"source": kind, "id": pid}
            if kind == "credit_card":
                method |= {"brand": rng.choice(("visa", "mastercard")),
                           "last_four": f"{rng.randrange(10_000):04d}"}
            else:
                method["amount"] = rng.randrange(50, 400)
            methods[pid] = method
        return {
            "user_id": user_id,
            "name": {"first_name": first.title(), "last_name": last.title()},
            "address": {"address1": f"{rng.randrange(10, 999)} {rng.choice(_STREETS)}",
                        "address2": f"Suite {rng.randrange(100, 999)}",
                        "city": "Houston", "country": "USA", "province": "TX",
                        "zip": f"77{rng.randrange(100, 999)}"},
            "email": f"{first}.{last}{rng.randrange(1000, 9999)}@example.com",
            "dob": f"19{rng.randrange(50, 99)}-{rng.randrange(1, 13):02d}-"
                   f"{rng.randrange(1, 29):02d}",
            "payment_methods": methods,
            "saved_passengers": [{"first_name": rng.choice(_FIRST).title(),
                                  "last_name": last.title(),
                                  "dob": f"19{rng.randrange(60, 99)}-0{rng.randrange(1, 9)}-1"
                                         f"{rng.randrange(0, 9)}"}],
            "membership": rng.choice(("regular", "silver", "gold")),
            "reservations": [self.code() for _ in range(rng.randrange(5, 8))],
        }

    def leg(self, origin: str, destination: str, date: str) -> dict[str, Any]:
        return {"origin": origin, "destination": destination,
                "flight_number": self.flight_number(), "date": date,
                "price": self.rng.randrange(90, 900)}

    def reservation(self, code: str, user: dict[str, Any], cabin: str | None = None,
                    round_trip: bool | None = None) -> dict[str, Any]:
        rng = self.rng
        origin = rng.choice(_AIRPORTS)
        destination = rng.choice([a for a in _AIRPORTS if a != origin])
        date = self.date(16, 24)
        if round_trip is None:
            round_trip = rng.random() < 0.6
        legs = [self.leg(origin, destination, date)]
        if round_trip:
            legs.append(self.leg(destination, origin, self.date(int(date[-2:]), 30)))
        payment = next(iter(user["payment_methods"]))
        return {
            "reservation_id": code, "user_id": user["user_id"], "origin": origin,
            "destination": destination,
            "flight_type": "round_trip" if round_trip else "one_way",
            "cabin": cabin or rng.choice(("basic_economy", "economy", "business")),
            "flights": legs,
            "passengers": [{"first_name": user["name"]["first_name"],
                            "last_name": user["name"]["last_name"], "dob": user["dob"]}],
            "payment_history": [{"payment_id": payment,
                                 "amount": sum(leg["price"] for leg in legs)}],
            "created_at": f"2024-05-{rng.randrange(1, 14):02d}T{rng.randrange(10, 23)}:"
                          f"{rng.randrange(10, 59)}:{rng.randrange(10, 59)}",
            "total_baggages": rng.randrange(0, 3), "nonfree_baggages": 0,
            "insurance": rng.choice(("yes", "no")),
        }

    def search(self, origin: str, destination: str, date: str, count: int) -> list[dict[str, Any]]:
        rng = self.rng
        flights = []
        for _ in range(count):
            hour = rng.randrange(5, 21)
            length = rng.randrange(2, 6)
            flights.append({
                "flight_number": self.flight_number(), "origin": origin,
                "destination": destination,
                "scheduled_departure_time_est": f"{hour:02d}:00:00",
                "scheduled_arrival_time_est": f"{(hour + length) % 24:02d}:30:00",
                "status": "available",
                "available_seats": {"basic_economy": rng.randrange(0, 20),
                                    "economy": rng.randrange(0, 20),
                                    "business": rng.randrange(0, 20)},
                "prices": {"basic_economy": rng.randrange(50, 100),
                           "economy": rng.randrange(100, 200),
                           "business": rng.randrange(200, 500)},
                "date": date,
            })
        return flights


def _open(run: _Run, world: _World, opening: str, **last: Any
          ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The usual start: the request, the user id, the profile, and every reservation read
    but the last (``last`` shapes it: the one the user will name)."""
    user = world.user()
    run.user(opening)
    run.agent("I can help with that. Could you please give me your user id so I can look up "
              "your profile?")
    run.user(f"Sure, it's {user['user_id']}.")
    run.call("get_user_details", {"user_id": user["user_id"]},
             {k: v for k, v in user.items() if k != "user_id"})
    codes = user["reservations"]
    reservations = [world.reservation(code, user) for code in codes[:-1]]
    reservations.append(world.reservation(codes[-1], user, **last))
    for res in reservations[:-1]:
        run.call("get_reservation_details", {"reservation_id": res["reservation_id"]}, res)
    return user, reservations


def _change_flights(rng: random.Random, reuse_ids: bool) -> dict[str, Any]:
    run, world = _Run(rng, reuse_ids), _World(rng)
    user, reservations = _open(run, world, "Hi! I need to move my return flight to a "
                               "different day, the quickest one you have.", cabin="economy",
                               round_trip=True)
    target = reservations[-1]
    origin, destination = target["origin"], target["destination"]
    run.agent(f"I found {len(reservations) - 1} reservations so far. Which trip is it: do you "
              f"remember the cities or the reservation code?")
    run.user(f"The {_CITIES[origin]} to {_CITIES[destination]} trip. I'd like to come back "
             "on May 27 instead.")
    run.call("get_reservation_details", {"reservation_id": target["reservation_id"]}, target)
    run.agent(f"That is reservation {target['reservation_id']}. Do you mean May 27, or would "
              "May 26 work too?")
    run.user("What do you have on May 26?")
    earlier = world.search(destination, origin, "2024-05-26", 5)
    run.call("search_direct_flight", {"origin": destination, "destination": origin,
                                      "date": "2024-05-26"}, earlier)
    run.agent(f"On May 26 there are {len(earlier)} direct flights, the earliest "
              f"{min(f['scheduled_departure_time_est'] for f in earlier)}.")
    run.user("Hmm, no, I can't leave before the 27th after all.")
    found = world.search(destination, origin, "2024-05-27", 6)
    run.call("search_direct_flight", {"origin": destination, "destination": origin,
                                      "date": "2024-05-27"}, found)
    best = min(found, key=lambda f: f["scheduled_arrival_time_est"])
    outbound = target["flights"][0]
    run.agent(
        f"Reservation {target['reservation_id']} flies {origin} to {destination} on "
        f"{outbound['date']} ({outbound['flight_number']}). On May 27 the quickest flight back "
        f"is {best['flight_number']}, leaving {best['scheduled_departure_time_est']} and "
        f"arriving {best['scheduled_arrival_time_est']}, ${best['prices']['economy']} in "
        f"economy. Which payment method should cover the difference?")
    gift = [p for p in user["payment_methods"] if p.startswith("gift_card")]
    payment = gift[0]
    run.user(f"Use the gift card ending {payment[-4:]}. And please add one checked bag.")
    flights = [{"flight_number": outbound["flight_number"], "date": outbound["date"]},
               {"flight_number": best["flight_number"], "date": "2024-05-27"}]
    run.agent(
        f"To confirm: change reservation {target['reservation_id']} to flights "
        f"{flights[0]['flight_number']} on {flights[0]['date']} and {best['flight_number']} "
        f"on 2024-05-27 in economy, paid with {payment}, and set the checked bags to "
        f"{target['total_baggages'] + 1}. Shall I go ahead (yes/no)?")
    run.user("Yes, go ahead.")
    changed = dict(target, flights=[dict(outbound), dict(best, price=best["prices"]["economy"])])
    run.call("update_reservation_flights", {"reservation_id": target["reservation_id"],
                                            "cabin": "economy", "flights": flights,
                                            "payment_id": payment}, changed)
    bags = {"reservation_id": target["reservation_id"],
            "total_baggages": target["total_baggages"] + 1, "nonfree_baggages": 0,
            "payment_id": payment}
    run.call("update_reservation_baggages", bags, dict(changed, **bags))
    run.agent(f"Done: reservation {target['reservation_id']} now returns on "
              f"{best['flight_number']} on May 27, with one more checked bag. Anything else?")
    run.user("No, that's all. Thanks!")
    run.agent("You're welcome, have a good trip!")
    return _record(run, user, [
        {"name": "update_reservation_flights",
         "kwargs": {"reservation_id": target["reservation_id"], "cabin": "economy",
                    "flights": flights, "payment_id": payment}},
        {"name": "update_reservation_baggages", "kwargs": bags}],
        "change the return flight of a round trip to May 27, add one checked bag")


def _cancel(rng: random.Random, reuse_ids: bool) -> dict[str, Any]:
    run, world = _Run(rng, reuse_ids), _World(rng)
    user, reservations = _open(run, world, "Hello, I have to cancel a trip, something came up "
                               "at work.", cabin="business")
    target = reservations[-1]
    run.agent("Which reservation would you like to cancel?")
    run.user(f"It's {target['reservation_id']}.")
    run.call("get_reservation_details", {"reservation_id": target["reservation_id"]}, target)
    run.call("think", {"thought": f"{target['reservation_id']} is in business: it can be "
                       "cancelled whatever the reason."}, "")
    first = target["flights"][0]
    refund = target["payment_history"][0]
    run.agent(
        f"Reservation {target['reservation_id']} ({first['flight_number']} on {first['date']}, "
        f"business) can be cancelled: business reservations are always refundable. "
        f"${refund['amount']} goes back to {refund['payment_id']} within 5 to 7 business "
        "days. Shall I cancel it (yes/no)?")
    run.user("Yes please.")
    run.call("cancel_reservation", {"reservation_id": target["reservation_id"]},
             dict(target, status="cancelled"))
    run.agent(f"Reservation {target['reservation_id']} is cancelled. Can I help with anything "
              "else?")
    run.user("Actually, is my other trip still fine? The one in economy.")
    others = [r for r in reservations[:-1] if r["cabin"] == "economy"] or reservations[:1]
    other = others[0]
    run.call("get_reservation_details", {"reservation_id": other["reservation_id"]}, other)
    run.agent(f"Yes: {other['reservation_id']} is unchanged, {other['flights'][0]['flight_number']}"
              f" on {other['flights'][0]['date']}, with {other['total_baggages']} checked "
              "bag(s).")
    run.user("Could you add one more bag to it? Put it on my credit card.")
    card = next(p for p in user["payment_methods"] if p.startswith("credit_card"))
    bags = {"reservation_id": other["reservation_id"],
            "total_baggages": other["total_baggages"] + 1, "nonfree_baggages": 1,
            "payment_id": card}
    run.agent(f"One extra bag on {other['reservation_id']} is $50, charged to {card}. Shall I "
              "add it (yes/no)?")
    run.user("Yes.")
    run.call("update_reservation_baggages", bags, dict(other, **bags))
    run.agent(f"Added: {other['reservation_id']} now has {bags['total_baggages']} checked "
              "bag(s).")
    run.user("Great, thank you.")
    run.agent("You're welcome!")
    return _record(run, user, [
        {"name": "cancel_reservation", "kwargs": {"reservation_id": target["reservation_id"]}},
        {"name": "update_reservation_baggages", "kwargs": bags}],
        "cancel a business reservation, add a bag to an economy one")


def _book(rng: random.Random, reuse_ids: bool) -> dict[str, Any]:
    run, world = _Run(rng, reuse_ids), _World(rng)
    user, _reservations = _open(run, world, "Hi, I want to book a one-way flight for me and my "
                               "partner.")
    origin, destination = rng.sample(_AIRPORTS, 2)
    date = world.date(20, 29)
    run.agent("Where from and where to, and on which day?")
    run.user(f"From {_CITIES[origin]} ({origin}) to {_CITIES[destination]} ({destination}) on "
             f"{date}, economy.")
    found = world.search(origin, destination, date, 8)
    run.call("search_direct_flight", {"origin": origin, "destination": destination,
                                      "date": date}, found)
    run.agent(f"There are {len(found)} direct flights that day. Do you have a preferred time, "
              "or should I look at the next day too?")
    run.user("Check the next day as well, then give me the cheapest of both days.")
    later = f"2024-05-{int(date[-2:]) + 1:02d}"
    run.call("search_direct_flight", {"origin": origin, "destination": destination,
                                      "date": later},
             [dict(f, prices=dict(f["prices"], economy=f["prices"]["economy"] + 120))
              for f in world.search(origin, destination, later, 7)])
    cheapest = min(found, key=lambda f: f["prices"]["economy"])
    partner = user["saved_passengers"][0]
    card = next(p for p in user["payment_methods"] if p.startswith("credit_card"))
    price = cheapest["prices"]["economy"] * 2
    run.agent(
        f"The cheapest economy flight is {cheapest['flight_number']} at "
        f"{cheapest['scheduled_departure_time_est']}, ${cheapest['prices']['economy']} per "
        f"passenger. Passengers: you and {partner['first_name']} {partner['last_name']} "
        f"(born {partner['dob']}), as saved in your profile? Total ${price}, paid with "
        f"{card}, no insurance, {1 if user['membership'] == 'regular' else 2} free bag(s) "
        "each. Shall I book it (yes/no)?")
    run.user("Yes, book it.")
    passengers = [{"first_name": user["name"]["first_name"],
                   "last_name": user["name"]["last_name"], "dob": user["dob"]}, partner]
    booking = {"user_id": user["user_id"], "origin": origin, "destination": destination,
               "flight_type": "one_way", "cabin": "economy",
               "flights": [{"flight_number": cheapest["flight_number"], "date": date}],
               "passengers": passengers,
               "payment_methods": [{"payment_id": card, "amount": price}],
               "total_baggages": 0, "nonfree_baggages": 0, "insurance": "no"}
    code = world.code()
    run.call("book_reservation", booking, dict(booking, reservation_id=code))
    run.agent(f"Booked: reservation {code}, {cheapest['flight_number']} on {date} for two.")
    run.user("Perfect, thanks.")
    run.agent("Have a nice flight!")
    return _record(run, user, [{"name": "book_reservation", "kwargs": booking}],
                   "book a one-way economy flight for two")


def _record(run: _Run, user: dict[str, Any], actions: list[dict[str, Any]],
            instruction: str) -> dict[str, Any]:
    return {"task_id": 0, "reward": 1.0, "trial": 0,
            "info": {"task": {"user_id": user["user_id"], "actions": actions,
                              "instruction": f"You are {user['user_id']}: {instruction}.",
                              "outputs": []},
                     "source": "user"},
            "traj": run.traj}


def airline_records(seed: int = 0) -> list[dict[str, Any]]:
    """Six runs: two of each kind (change flights, cancel, book), the second of each pair
    reusing a tool call id."""
    makers = (_change_flights, _cancel, _book)
    records = []
    for number in range(6):
        rng = random.Random(seed * 1_000 + number)
        record = makers[number % 3](rng, reuse_ids=number >= 3)
        record["task_id"] = number % 3
        record["trial"] = number // 3
        records.append(record)
    return records
