"""The task kinds: each draws a seeded task (prompt, sandbox files, answer) and plays its reference solution.

A task kind is one small class: `draw(rng, corpus)` makes the task, `reference(results)` is the oracle's
next action given what the tools answered to each of its earlier actions.
The oracle reads values back from tool output where it can, so that a broken tool fails the oracle
tests instead of being papered over by hidden state.
"""

from __future__ import annotations

import json
import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import envhub
from envhub.messages import Message, ToolCall
from envhub_tools.corpus import Corpus, Document

WORKDIR = "/work"
"""The sandbox's workspace: every file tool works below it."""


def calls(step: int, *requests: tuple[str, dict[str, Any]]) -> Message:
    """One assistant message calling several tools at once (they run concurrently)."""
    made = [ToolCall.create(name, args, id=f"call_{step}_{i}") for i, (name, args) in enumerate(requests)]
    return Message(role="assistant", tool_calls=made)


def _found(pattern: str, text: str) -> list[str]:
    """Every match of `pattern` in a tool's output; the oracle stops here if a tool answered nonsense."""
    found = re.findall(pattern, text, flags=re.MULTILINE)
    if not found:
        raise ValueError(f"the oracle expected {pattern!r} in the tool output, got {text[:200]!r}")
    return found


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


@dataclass(frozen=True, kw_only=True)
class Task(ABC):
    """One drawn task. `expected` never enters the sandbox; only `files` (the task's inputs) do."""

    kind: ClassVar[str]
    prompt: str
    expected: int
    files: dict[str, str] = field(default_factory=dict)
    """Inputs written below the workspace at setup, by relative path."""
    output_file: str | None = None
    """When set, the answer is graded by reading this workspace file, not the agent's reply."""

    @classmethod
    @abstractmethod
    def draw(cls, rng: random.Random, corpus: Corpus) -> Task:
        """A task drawn from `rng` alone."""

    @abstractmethod
    def reference(self, results: list[list[str]]) -> envhub.Action:
        """The oracle's next action; `results[i]` are the tool outputs answering its action `i`."""

    def shows_answer(self) -> bool:
        """Whether the answer happens to appear as a number in an input file (then the task is redrawn)."""
        pattern = re.compile(rf"(?<![\d.]){self.expected}(?![\d.])")
        return any(pattern.search(content) for content in self.files.values())


@dataclass(frozen=True, kw_only=True)
class FileSum(Task):
    """List a folder, read every record in it (in parallel), add the amounts with the calculator."""

    kind: ClassVar[str] = "file-sum"
    folder: str

    @classmethod
    def draw(cls, rng: random.Random, corpus: Corpus) -> FileSum:
        folder, noun = rng.choice([("invoices", "invoice"), ("receipts", "receipt"), ("expenses", "expense")])
        numbers = rng.sample(range(100, 1000), rng.randint(3, 6))
        amounts = [rng.randint(1000, 9999) for _ in numbers]
        files = {f"{folder}/README.md": f"One file per {noun}. Amounts are in credits.\n"}
        for number, amount in zip(numbers, amounts, strict=True):
            month, day = rng.randint(1, 12), rng.randint(1, 28)
            files[f"{folder}/{noun}-{number}.txt"] = (
                f"{noun.title()} {number}\nDate: 2031-{month:02d}-{day:02d}\nAmount: {amount} credits\n"
            )
        prompt = (
            f"The folder `{folder}/` in your workspace holds one text file per {noun}. What is the total "
            f"amount, in credits, of all the {noun}s? Use the tools, then reply with the number only."
        )
        return cls(prompt=prompt, expected=sum(amounts), files=files, folder=folder)

    def reference(self, results: list[list[str]]) -> envhub.Action:
        step, outputs = len(results), (results[-1] if results else [])
        if step == 0:
            return calls(step, ("list_files", {"path": self.folder}))
        if step == 1:
            names = [n for n in json.loads(outputs[0]) if n.endswith(".txt")]
            return calls(step, *(("read_file", {"path": f"{self.folder}/{n}"}) for n in names))
        if step == 2:
            amounts = [_found(r"^Amount: (\d+)", text)[0] for text in outputs]
            return calls(step, ("calculate", {"expression": " + ".join(amounts)}))
        return outputs[0]


@dataclass(frozen=True)
class Attribute:
    """A number the corpus states for every document of one kind, and how to ask about it."""

    kind: str
    name: str
    query: str
    total: str | None
    difference: str


ATTRIBUTES = [
    Attribute(
        "city",
        "population",
        "population",
        "What is the combined population of {all}?",
        "How many more people live in {a} than in {b}?",
    ),
    Attribute("city", "founded", "founded", None, "How many years after {b} was {a} founded?"),
    Attribute(
        "city",
        "elevation",
        "metres above sea level",
        "What do the elevations of {all} add up to, in metres?",
        "How many metres higher above sea level is {a} than {b}?",
    ),
    Attribute(
        "company",
        "employees",
        "employees",
        "How many employees do {all} have together?",
        "How many more employees does {a} have than {b}?",
    ),
    Attribute(
        "company",
        "revenue",
        "revenue",
        "What is the combined annual revenue of {all}, in million credits?",
        "By how many million credits is the annual revenue of {a} larger than that of {b}?",
    ),
    Attribute("company", "founded", "founded", None, "How many years after {b} was {a} founded?"),
    Attribute(
        "product",
        "price",
        "price credits",
        "How many credits does it cost to buy one each of {all}?",
        "How many credits more expensive is {a} than {b}?",
    ),
    Attribute(
        "product",
        "weight",
        "weighs grams",
        "What is the total weight, in grams, of {all}?",
        "How many grams heavier is {a} than {b}?",
    ),
]


def _named(document: Document) -> str:
    return f"the {document.title}" if document.kind == "product" else document.title


@dataclass(frozen=True, kw_only=True)
class SearchCompute(Task):
    """Search the corpus for two or three facts (in parallel), then combine them with the calculator."""

    kind: ClassVar[str] = "search-compute"
    queries: tuple[str, ...]
    expression: str

    @classmethod
    def draw(cls, rng: random.Random, corpus: Corpus) -> SearchCompute:
        attribute = rng.choice(ATTRIBUTES)
        documents = corpus.of_kind(attribute.kind)
        if attribute.total is not None and rng.random() < 0.5:
            chosen = rng.sample(documents, rng.choice([2, 3]))
            question = attribute.total.format(all=_and([_named(d) for d in chosen]))
            values = [d.facts[attribute.name] for d in chosen]
            expression, expected = " + ".join(map(str, values)), sum(values)
        else:
            chosen = sorted(rng.sample(documents, 2), key=lambda d: -d.facts[attribute.name])
            a, b = (d.facts[attribute.name] for d in chosen)
            question = attribute.difference.format(a=_named(chosen[0]), b=_named(chosen[1]))
            expression, expected = f"{a} - {b}", a - b
        prompt = (
            f"{question} The facts are in the document collection: search it, compute with the "
            "calculator, then reply with the number only."
        )
        queries = tuple(f"{d.title} {attribute.query}" for d in chosen)
        return cls(prompt=prompt, expected=expected, queries=queries, expression=expression)

    def reference(self, results: list[list[str]]) -> envhub.Action:
        step, outputs = len(results), (results[-1] if results else [])
        if step == 0:
            return calls(step, *(("search", {"query": q}) for q in self.queries))
        if step == 1:
            return calls(step, ("calculate", {"expression": self.expression}))
        return outputs[0]


CUSTOMERS = ["Ilse Varrow", "Tomas Quell", "Maren Oduya", "Piet Lasko", "Anouk Drell", "Rafe Sundqvist"]


@dataclass(frozen=True, kw_only=True)
class OrderTotal(Task):
    """Find an order among files, read its items, look up each unit price in the corpus, total it."""

    kind: ClassVar[str] = "order-total"
    order_file: str
    items: tuple[tuple[int, str], ...]
    """(quantity, product title) of the asked-for order."""
    prices: dict[str, int]

    @classmethod
    def draw(cls, rng: random.Random, corpus: Corpus) -> OrderTotal:
        products = corpus.of_kind("product")
        numbers = rng.sample(range(1000, 10000), rng.randint(2, 4))
        files: dict[str, str] = {}
        orders: list[list[tuple[int, Document]]] = []
        for number in numbers:
            items = [(rng.randint(2, 40), d) for d in rng.sample(products, rng.randint(2, 3))]
            lines = "".join(f"- {quantity} x {d.title}\n" for quantity, d in items)
            customer = rng.choice(CUSTOMERS)
            files[f"orders/order-{number}.txt"] = f"Order {number}\nCustomer: {customer}\nItems:\n{lines}"
            orders.append(items)
        target = rng.randrange(len(numbers))
        expected = sum(quantity * d.facts["price"] for quantity, d in orders[target])
        prompt = (
            f"Order {numbers[target]} is one of the files in `orders/`. The unit prices are in the product "
            "catalogue, which you can search. What is the order's total price in credits? Reply with the "
            "number only."
        )
        return cls(
            prompt=prompt,
            expected=expected,
            files=files,
            order_file=f"orders/order-{numbers[target]}.txt",
            items=tuple((quantity, d.title) for quantity, d in orders[target]),
            prices={d.title: d.facts["price"] for d in products},
        )

    def reference(self, results: list[list[str]]) -> envhub.Action:
        step, outputs = len(results), (results[-1] if results else [])
        if step == 0:
            return calls(step, ("list_files", {"path": "orders"}))
        if step == 1:
            name = self.order_file.removeprefix("orders/")
            if name not in json.loads(outputs[0]):
                raise ValueError(f"the oracle expected {name} in the listing, got {outputs[0]!r}")
            return calls(step, ("read_file", {"path": self.order_file}))
        if step == 2:
            items = _found(r"^- \d+ x (.+)$", outputs[0])
            return calls(step, *(("search", {"query": f"{title} price", "k": 1}) for title in items))
        if step == 3:
            # The price of whatever the search found: a search that ranks the wrong product first fails.
            found = [json.loads(text)[0]["title"] for text in outputs]
            terms = [f"{q} * {self.prices[t]}" for (q, _), t in zip(self.items, found, strict=True)]
            return calls(step, ("calculate", {"expression": " + ".join(terms)}))
        return outputs[0]


@dataclass(frozen=True, kw_only=True)
class WriteReport(Task):
    """Read a log, compute a statistic with the calculator, write it to a file: graded from the file."""

    kind: ClassVar[str] = "write-report"
    source: str
    statistic: str
    threshold: int

    STATISTICS: ClassVar[dict[str, str]] = {
        "total": "the sum of all the readings",
        "range": "the largest reading minus the smallest",
        "above": "the sum of the readings above {threshold}",
    }

    @classmethod
    def draw(cls, rng: random.Random, corpus: Corpus) -> WriteReport:
        station = rng.choice(["north-ridge", "lakeside", "harbour", "old-mill", "quarry"])
        readings = [rng.randint(100, 9999) for _ in range(rng.randint(5, 9))]
        statistic = rng.choice(sorted(cls.STATISTICS))
        threshold = sorted(readings)[len(readings) // 2]
        source, output = f"sensors/{station}.log", f"reports/{station}-{statistic}.txt"
        lines = "".join(f"2031-06-{day:02d} reading: {r}\n" for day, r in enumerate(readings, start=1))
        what = cls.STATISTICS[statistic].format(threshold=threshold)
        prompt = (
            f"The file `{source}` has one sensor reading per line. Compute {what}, and write that number "
            f"(digits only) to the file `{output}`. The file is what gets checked. Reply 'done' when it is "
            "written."
        )
        if statistic == "range":
            expected = max(readings) - min(readings)
        else:
            expected = sum(r for r in readings if statistic == "total" or r > threshold)
        return cls(
            prompt=prompt,
            expected=expected,
            files={source: lines},
            output_file=output,
            source=source,
            statistic=statistic,
            threshold=threshold,
        )

    def expression(self, readings: list[int]) -> str:
        """The oracle's calculator expression for this task's statistic over `readings`."""
        if self.statistic == "range":
            listed = ", ".join(map(str, readings))
            return f"max({listed}) - min({listed})"
        chosen = readings if self.statistic == "total" else [r for r in readings if r > self.threshold]
        return " + ".join(map(str, chosen))

    def reference(self, results: list[list[str]]) -> envhub.Action:
        step, outputs = len(results), (results[-1] if results else [])
        if step == 0:
            return calls(step, ("read_file", {"path": self.source}))
        if step == 1:
            readings = [int(r) for r in _found(r"reading: (\d+)$", outputs[0])]
            return calls(step, ("calculate", {"expression": self.expression(readings)}))
        if step == 2:
            assert self.output_file is not None
            return calls(step, ("write_file", {"path": self.output_file, "content": outputs[0]}))
        return "done"


MONTHS = ["January", "February", "March", "April", "May", "June"]
REGIONS = ["North", "South", "East", "West"]


@dataclass(frozen=True, kw_only=True)
class CsvQuery(Task):
    """Aggregate a CSV with Python, look up the products' unit prices by search, total with the calculator."""

    kind: ClassVar[str] = "csv-query"
    condition: str
    """The oracle's row filter, as Python over a `csv.DictReader` row `r`."""
    prices: dict[str, int]

    @classmethod
    def draw(cls, rng: random.Random, corpus: Corpus) -> CsvQuery:
        products = rng.sample(corpus.of_kind("product"), 4)
        rows = [
            {
                "order_id": str(order_id),
                "month": rng.choice(MONTHS),
                "region": rng.choice(REGIONS),
                "product": rng.choice(products).title,
                "units": str(rng.randint(1, 60)),
            }
            for order_id in rng.sample(range(10000, 100000), rng.randint(40, 90))
        ]
        question = rng.choice(["product-region", "month", "region-month"])
        product, region, month = rng.choice(products).title, rng.choice(REGIONS), rng.choice(MONTHS)
        if question == "product-region":
            keys, what = {"product": product, "region": region}, f"{product} sales in the {region} region"
        elif question == "month":
            keys, what = {"month": month}, f"all sales in {month}"
        else:
            keys, what = {"region": region, "month": month}, f"sales in the {region} region in {month}"
        prices = {d.title: d.facts["price"] for d in products}
        expected = sum(
            int(r["units"]) * prices[r["product"]] for r in rows if all(r[k] == v for k, v in keys.items())
        )
        header = list(rows[0])
        table = ",".join(header) + "\n" + "".join(",".join(r[h] for h in header) + "\n" for r in rows)
        prompt = (
            "The file `data/sales.csv` lists orders, one per row, with the units sold. Unit prices are "
            "in the product catalogue, which you can search. What was the total revenue, in credits, of "
            f"{what}? Reply with the number only."
        )
        condition = " and ".join(f"r[{k!r}] == {v!r}" for k, v in keys.items())
        return cls(
            prompt=prompt,
            expected=expected,
            files={"data/sales.csv": table},
            condition=condition,
            prices={d.title: d.facts["price"] for d in corpus.of_kind("product")},
        )

    def reference(self, results: list[list[str]]) -> envhub.Action:
        step, outputs = len(results), (results[-1] if results else [])
        if step == 0:
            code = (
                "import csv, json, collections\n"
                "units = collections.Counter()\n"
                f"with open({WORKDIR + '/data/sales.csv'!r}) as f:\n"
                "    for r in csv.DictReader(f):\n"
                f"        if {self.condition}:\n"
                "            units[r['product']] += int(r['units'])\n"
                "print(json.dumps(dict(sorted(units.items()))))\n"
            )
            return calls(step, ("python", {"code": code}))
        if step == 1:
            units: dict[str, int] = json.loads(outputs[0])
            return calls(step, *(("search", {"query": f"{title} price", "k": 1}) for title in units))
        if step == 2:
            units = json.loads(results[0][0])
            found = [json.loads(text)[0]["title"] for text in outputs]
            terms = [f"{n} * {self.prices[t]}" for n, t in zip(units.values(), found, strict=True)]
            return calls(step, ("calculate", {"expression": " + ".join(terms)}))
        return outputs[0]


KINDS: dict[str, type[Task]] = {
    kind.kind: kind for kind in (FileSum, SearchCompute, OrderTotal, WriteReport, CsvQuery)
}


def draw_task(kind: str, rng: random.Random, corpus: Corpus) -> Task:
    """A task of `kind` from `rng`, redrawn in the rare case its answer is zero (a guess, not a result)
    or already a number in its input files."""
    for _ in range(100):
        task = KINDS[kind].draw(rng, corpus)
        if task.expected > 0 and not task.shows_answer():
            return task
    raise RuntimeError(f"could not draw a {kind} task with a positive answer not in its own input files")
