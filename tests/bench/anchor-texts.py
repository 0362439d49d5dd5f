#!/usr/bin/env python3
"""Writes the held-out texts of tests/bench/anchors.sh (deterministic).

Each story introduces a child by name in its first two sentences, then
tells FILLER sentences that never name the child again (long enough that a
cache of 128 tokens has moved past the name), then asks for the name.

  anchor-texts.py OUTDIR [N_STORIES] [FILLER]

OUTDIR/probe.txt:   one story per line, CONTEXT<TAB>ANSWER (`sinkd eval
                    --probe`): the answer is " Name", what the last words
                    ask for.
OUTDIR/stories.txt: the same stories whole, one per line (plain
                    `sinkd eval` perplexity on text not from the dev set).
"""
import random
import sys

GIRLS = ["Lily", "Sue", "Anna", "Mia", "Lucy", "Zoe", "Amy", "Sara", "Kate", "Ella"]
BOYS = ["Tom", "Ben", "Max", "Tim", "Sam", "Jack", "Bob", "Jake", "Leo", "Mark"]
LIKES = ["play with {poss} ball", "draw pictures", "sing songs", "read books",
         "help {poss} mom", "run in the grass", "look at the stars", "build towers"]
FILLER = [
    "{P} went to the park with {poss} ball.",
    "The sun was warm and the sky was blue.",
    "{P} saw a big red bird in a tree.",
    "The bird sang a happy song.",
    "{P} wanted to play with the bird, but it flew away.",
    "{P} felt a little sad.",
    "Then {p} found a shiny stone on the ground.",
    "{P} picked it up and put it in {poss} pocket.",
    "A small dog ran up to {o} and barked.",
    "The dog wanted to play too.",
    "They ran and jumped together for a long time.",
    "{P} was very happy to have a new friend.",
    "{P} shared {poss} snack with the dog.",
    "The dog wagged its tail.",
    "Soon it started to rain.",
    "{P} ran under a big tree to stay dry.",
    "The rain made the flowers grow.",
    "When the rain stopped, {p} saw a rainbow.",
    "{P} smiled and clapped {poss} hands.",
    "{P} went back home for lunch.",
    "Mom made soup and bread.",
    "After lunch, {p} took a nap.",
    "When {p} woke up, {p} wanted to go outside again.",
    "{P} looked for {poss} toy car.",
    "It was under the bed.",
    "{P} played with the car in the garden.",
    "A friendly cat came to watch.",
    "The cat was soft and gray.",
    "{P} gave the cat some milk.",
    "The cat sat in the sun and closed its eyes.",
]


def story(rng, filler):
    girl = rng.random() < 0.5
    name = rng.choice(GIRLS if girl else BOYS)
    w = {"P": "She" if girl else "He", "p": "she" if girl else "he",
         "o": "her" if girl else "him", "poss": "her" if girl else "his"}
    kid = "girl" if girl else "boy"
    like = rng.choice(LIKES).format(**w)
    head = f"Once upon a time, there was a little {kid} named {name}. {name} loved to {like}."
    body = " ".join(s.format(**w) for s in rng.sample(FILLER, filler))
    ask = f'At the end of the day, {w["poss"]} mom hugged {w["o"]} and said, "I love you,'
    return " ".join(part for part in (head, body, ask) if part), f" {name}"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    filler = int(sys.argv[3]) if len(sys.argv) > 3 else 18
    if not 0 <= filler <= len(FILLER):
        sys.exit(f"FILLER must be in [0, {len(FILLER)}]")
    rng = random.Random(25)
    with open(f"{out}/probe.txt", "w") as probe, open(f"{out}/stories.txt", "w") as whole:
        for _ in range(n):
            context, answer = story(rng, filler)
            probe.write(f"{context}\t{answer}\n")
            whole.write(f'{context}{answer}." The End.\n')


if __name__ == "__main__":
    main()
