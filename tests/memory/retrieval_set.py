"""A labelled retrieval set: what an assistant might remember about one user, and questions
asked later with the memories that answer them.

45 target memories are written by hand across twelve topics; 170 distractors are built
from templates that reuse the targets' vocabulary (coffee, flights, backend, dog, rent…)
about other people, so a query's words also match memories that do not answer it. The
queries paraphrase: most share a word or a word's stem with their answer, a few share
none (those only a semantic backend could find; full text is expected to miss them).
"""

from dataclasses import dataclass

TARGETS: dict[str, str] = {
    # food
    "f1": "The user is vegetarian and avoids fish as well as meat.",
    "f2": "The user is allergic to peanuts; even traces cause a severe reaction.",
    "f3": "The user drinks oat milk flat whites, usually two cups of coffee before noon.",
    "f4": "The user's favourite restaurant is Trattoria Da Mario on Elm Street.",
    # travel
    "t1": "The user's passport expires in March 2027.",
    "t2": "The user prefers aisle seats on flights longer than two hours.",
    "t3": "The user is planning a hiking trip to Patagonia in November.",
    "t4": "The user has Star Alliance Gold status with Lufthansa Miles & More.",
    # work
    "w1": "The user works as a backend engineer at Nordlicht Logistics.",
    "w2": "The user prefers Go for backend services and Python for data scripts.",
    "w3": "The user's team deploys to production every Tuesday and Thursday.",
    "w4": "The user's manager is Priya Raman, who prefers written status updates.",
    "w5": "The quarterly planning deadline for the user's team is 14 February.",
    # family
    "fa1": "Emma, the user's daughter, has her birthday on 3 May; she turns seven.",
    "fa2": "The user's partner, Jonas, is a nurse who works night shifts.",
    "fa3": "The user's mother lives in Porto and visits every summer.",
    # health
    "h1": "The user runs 5 km three times a week and is training for a half marathon.",
    "h2": "The user takes thyroid medication every morning before breakfast.",
    "h3": "The user's dentist appointment is booked for 12 June at 9:30.",
    # pets
    "p1": "The user has a border collie named Biscuit who is afraid of thunderstorms.",
    "p2": "Biscuit the dog needs his rabies vaccination renewed in April.",
    # money
    "fi1": "The user's monthly budget for groceries is 400 euros.",
    "fi2": "The user wants to save for a house deposit within three years.",
    "fi3": "The user pays rent on the first working day of each month.",
    # home
    "ho1": "The user's apartment has no elevator and is on the fourth floor.",
    "ho2": "The user's heating is a gas boiler serviced every October.",
    "ho3": "The wifi router at the user's home is in the hallway, so the office gets a weak signal.",
    # hobbies
    "hb1": "The user plays cello in an amateur orchestra on Wednesday evenings.",
    "hb2": "The user likes science-fiction novels, especially by Ursula K. Le Guin.",
    "hb3": "The user is learning to bake sourdough bread.",
    # schedule
    "s1": "The user does not take meetings before 10 am.",
    "s2": "The user's weekly one-on-one meeting with Priya is on Monday at 11.",
    "s3": "The user is on holiday from 20 July to 4 August.",
    # devices
    "te1": "The user's laptop is a 2021 MacBook Pro with 16 GB of RAM.",
    "te2": "The user uses Neovim as their editor with a dark colour scheme.",
    "te3": "The user's phone is an Android Pixel 7.",
    # languages
    "l1": "The user is learning Japanese and practises kanji for twenty minutes daily.",
    "l2": "The user speaks German and Portuguese fluently.",
    "l3": "The user prefers answers in English, short and with bullet points.",
    # car and community
    "m1": "The user's car is a blue 2018 Skoda Octavia estate.",
    "m2": "The user's car insurance renewal is due in September.",
    "m3": "The user volunteers at the food bank on the last Saturday of each month.",
    "m4": "The user's gym membership is paused until the knee injury heals.",
    "m5": "The user's bank is ING and card payments abroad are free.",
    "m6": "The user's favourite football club is FC Porto.",
}

DISTRACTOR_SUBJECTS = [
    "The sales team",
    "A colleague from accounting",
    "The neighbour upstairs",
    "The landlord",
    "Priya's other report",
    "The support desk",
    "The finance department",
    "The user's cousin",
    "The book club organiser",
    "A former classmate",
]
DISTRACTOR_PREDICATES = [
    "ordered a new coffee machine for the office kitchen",
    "booked flights to Berlin for the spring conference",
    "is migrating the billing backend to a new database",
    "lost a passport photo form at the town hall",
    "adopted a rescue dog from the shelter last winter",
    "asked about the rent increase for the ground floor shop",
    "complained that the heating in the meeting room is broken",
    "recommended a bakery that sells rye bread on weekends",
    "plays guitar in a jazz band on Friday nights",
    "is training for a cycling race in the mountains",
    "bought a second-hand car with a broken radio",
    "moved the team meeting notes to a shared wiki",
    "is learning Spanish with an evening course",
    "went on holiday to Crete in early June",
    "replaced the router in the print room",
    "set a budget for the summer party",
    "reviewed the insurance policy for the company vans",
]


@dataclass(frozen=True)
class LabelledQuery:
    text: str
    relevant: tuple[str, ...]


QUERIES = [
    LabelledQuery("What should I avoid when suggesting dinner recipes?", ("f1", "f2")),
    LabelledQuery("How does the user take their coffee?", ("f3",)),
    LabelledQuery("When does my passport expire?", ("t1",)),
    LabelledQuery("Which seat should I book on the flight to Lisbon?", ("t2",)),
    LabelledQuery("Plans for the hiking trip in South America", ("t3",)),
    LabelledQuery("What programming language for the new backend service?", ("w2", "w1")),
    LabelledQuery("When can we deploy the release to production?", ("w3",)),
    LabelledQuery("How does my manager like to receive updates?", ("w4",)),
    LabelledQuery("Birthday present ideas for Emma", ("fa1",)),
    LabelledQuery("When does Jonas work?", ("fa2",)),
    LabelledQuery("Training plan for the half marathon", ("h1",)),
    LabelledQuery("Reminder about taking medication", ("h2",)),
    LabelledQuery("When is the dentist appointment?", ("h3",)),
    LabelledQuery("The dog gets scared during storms, what can help?", ("p1",)),
    LabelledQuery("Vet visit and vaccinations for Biscuit", ("p2", "p1")),
    LabelledQuery("How much can I spend on groceries this month?", ("fi1",)),
    LabelledQuery("Saving money for buying a house", ("fi2",)),
    LabelledQuery("When is the rent due?", ("fi3",)),
    LabelledQuery("Will the movers need to carry the sofa up many stairs?", ("ho1",)),
    LabelledQuery("Boiler maintenance", ("ho2",)),
    LabelledQuery("Why is the internet slow in the office?", ("ho3",)),
    LabelledQuery("Orchestra rehearsal evenings", ("hb1",)),
    LabelledQuery("Good novels to recommend as a gift", ("hb2",)),
    LabelledQuery("Tips for baking sourdough", ("hb3",)),
    LabelledQuery("Best time to schedule a meeting with the user", ("s1", "s2")),
    LabelledQuery("Is the user around in late July?", ("s3",)),
    LabelledQuery("Can my laptop handle Docker with several containers?", ("te1",)),
    LabelledQuery("Which languages does the user speak or study?", ("l2", "l1")),
    LabelledQuery("How should answers be formatted?", ("l3",)),
    LabelledQuery("When does the car insurance need renewing?", ("m2",)),
]


def distractors() -> list[str]:
    return [
        f"{subject} {predicate}." for predicate in DISTRACTOR_PREDICATES for subject in DISTRACTOR_SUBJECTS
    ]


def recall_at(k: int, ranked_keys: list[list[str]]) -> float:
    """Mean over the queries of the share of their relevant memories in the top ``k``."""
    shares = []
    for query, keys in zip(QUERIES, ranked_keys, strict=True):
        found = len(set(query.relevant) & set(keys[:k]))
        shares.append(found / min(len(query.relevant), k))
    return sum(shares) / len(shares)
