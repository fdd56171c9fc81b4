"""Write the small sample datasets under data/samples/ (deterministic; run from anywhere).

    python data/samples/make_samples.py

The samples are NOT excerpts of the real datasets: every sentence is generated here from
templates, so the course can ship them freely. They use the same raw formats as upstream
(GLUE SST-2 tsv, CLINC150 ``data_full.json`` + ``domains.json``, UD CoNLL-U; each file has a
name of its own, ``course.data.SAMPLE_NAMES``, so it is never mistaken for an upstream file), so
``course.data`` reads them with the very parsers it uses for the real files. They exist so
that every notebook runs end to end offline; results on them mean nothing.

Only the CLINC150 domain and intent *names* below are facts taken from the real dataset
(Larson et al., 2019): the samples must have the same 150 intents as the real data.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Same mapping as course.data.SAMPLE_NAMES (kept here so this script runs without the package;
# tests/test_data.py checks the two agree).
SAMPLE_NAMES = {
    "train.tsv": "sample_sst2_train.tsv",
    "dev.tsv": "sample_sst2_dev.tsv",
    "data_full.json": "sample_clinc150.json",
    "domains.json": "sample_clinc150_domains.json",
    "en_ewt-ud-train.conllu": "sample_ewt_train.conllu",
    "en_ewt-ud-dev.conllu": "sample_ewt_dev.conllu",
    "en_ewt-ud-test.conllu": "sample_ewt_test.conllu",
}
SEED = 2024

# --------------------------------------------------------------------------- SST-2 (tsv)

POS_ADJ = "moving funny clever gripping charming beautiful sharp warm brilliant touching delightful smart tender witty thrilling".split()
NEG_ADJ = "dull tedious clumsy boring flat shallow messy lifeless predictable bland tiresome silly pointless sloppy forgettable".split()
NOUNS = "film movie story script cast plot comedy drama thriller performance ending direction dialogue soundtrack premise".split()
POS_TEMPLATES = [
    "a {a} and {b} {n}",
    "the {n} is {a} , {b} and never less than {c}",
    "one of the most {a} {n}s of the year",
    "{a} , {b} and often very {c}",
    "the director delivers a {a} {n} that feels {b}",
    'an " {a} " {n} that earns its laughs',
    "it 's a {a} , {b} piece of work",
    "you 'll leave the theater feeling {a}",
]
NEG_TEMPLATES = [
    "a {a} and {b} {n}",
    "the {n} is {a} , {b} and far too {c}",
    "one of the most {a} {n}s of the year",
    "{a} , {b} and often painfully {c}",
    "the director delivers a {a} {n} that feels {b}",
    'a so-called " thriller " that is merely {a}',
    "it 's a {a} , {b} waste of time",
    "you 'll leave the theater feeling {a}",
]


def sst2_sentence(rng: random.Random, label: int) -> str:
    adjs, templates = (POS_ADJ, POS_TEMPLATES) if label == 1 else (NEG_ADJ, NEG_TEMPLATES)
    a, b, c = rng.sample(adjs, 3)
    return rng.choice(templates).format(a=a, b=b, c=c, n=rng.choice(NOUNS))


def write_sst2(rng: random.Random) -> None:
    out = HERE / "sst2"
    out.mkdir(exist_ok=True)
    for fname, n in [("train.tsv", 400), ("dev.tsv", 100)]:
        rows = ["sentence\tlabel"]
        for i in range(n):
            label = i % 2
            rows.append(f"{sst2_sentence(rng, label)}\t{label}")
        (out / SAMPLE_NAMES[fname]).write_text("\n".join(rows) + "\n", encoding="utf-8")


# ------------------------------------------------------------------ CLINC150 (json)

# The 10 domains and 150 intents of CLINC150 (domains.json at the pinned commit).
DOMAINS: dict[str, list[str]] = {
    "banking": "freeze_account routing pin_change bill_due pay_bill account_blocked interest_rate min_payment bill_balance transfer order_checks balance spending_history transactions report_fraud".split(),
    "credit_cards": "replacement_card_duration expiration_date damaged_card improve_credit_score report_lost_card card_declined credit_limit_change apr redeem_rewards credit_limit rewards_balance application_status credit_score new_card international_fees".split(),
    "kitchen_and_dining": "food_last confirm_reservation how_busy ingredients_list calories nutrition_info recipe restaurant_reviews restaurant_reservation meal_suggestion restaurant_suggestion cancel_reservation ingredient_substitution cook_time accept_reservations".split(),
    "home": "what_song play_music todo_list_update reminder reminder_update calendar_update order_status update_playlist shopping_list calendar next_song order todo_list shopping_list_update smart_home".split(),
    "auto_and_commute": "current_location oil_change_when oil_change_how uber traffic tire_pressure schedule_maintenance gas mpg distance directions last_maintenance gas_type tire_change jump_start".split(),
    "travel": "plug_type travel_notification translate flight_status international_visa timezone exchange_rate travel_suggestion travel_alert vaccines lost_luggage book_flight book_hotel carry_on car_rental".split(),
    "utility": "weather alarm date find_phone share_location timer make_call calculator definition measurement_conversion flip_coin spelling time roll_dice text".split(),
    "work": "pto_request_status next_holiday insurance_change insurance meeting_schedule payday taxes income rollover_401k pto_balance pto_request w2 schedule_meeting direct_deposit pto_used".split(),
    "small_talk": "who_made_you meaning_of_life who_do_you_work_for do_you_have_pets what_are_your_hobbies fun_fact what_is_your_name where_are_you_from goodbye thank_you greeting tell_joke are_you_a_bot how_old_are_you what_can_i_ask_you".split(),
    "meta": "change_speed user_name whisper_mode yes change_volume no change_language repeat change_accent cancel sync_device change_user_name change_ai_name reset_settings maybe".split(),
}
INTENT_TEMPLATES = [
    "can you help me with {w}",
    "i need some help with {w}",
    "{w} please",
    "tell me about {w}",
    "i have a question about {w}",
    "could you handle {w} for me",
    "what do i do about {w}",
    "let's talk about {w} right now",
]
OOS_TEMPLATES = [
    "what is the tallest {x} in the world",
    "who invented the {x}",
    "how do i fix a broken {x}",
    "write a poem about a {x}",
    "why is the {x} so loud today",
    "where can i adopt a {x}",
]
OOS_THINGS = "mountain bicycle piano lighthouse volcano telescope kite submarine cactus parrot glacier violin".split()
# (split name in data_full.json, utterances per intent, oos split, oos rows)
CLINC_SPLITS = [
    ("train", 6, "oos_train", 24),
    ("val", 2, "oos_val", 10),
    ("test", 3, "oos_test", 30),
]


def write_clinc150(rng: random.Random) -> None:
    out = HERE / "clinc150"
    out.mkdir(exist_ok=True)
    data: dict[str, list[list[str]]] = {}
    for split, per_intent, oos_split, n_oos in CLINC_SPLITS:
        rows = []
        for intents in DOMAINS.values():
            for intent in intents:
                words = intent.replace("_", " ")
                for template in rng.sample(INTENT_TEMPLATES, per_intent):
                    rows.append([template.format(w=words), intent])
        data[split] = rows
        data[oos_split] = [
            [rng.choice(OOS_TEMPLATES).format(x=rng.choice(OOS_THINGS)), "oos"]
            for _ in range(n_oos)
        ]
    # Compact JSON (one row per line) keeps the file small yet readable.
    lines = ["{"]
    for i, (key, rows) in enumerate(data.items()):
        body = ",\n".join("    " + json.dumps(row) for row in rows)
        lines.append(f'  "{key}": [\n{body}\n  ]' + ("," if i < len(data) - 1 else ""))
    lines.append("}")
    (out / SAMPLE_NAMES["data_full.json"]).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / SAMPLE_NAMES["domains.json"]).write_text(
        json.dumps(DOMAINS, indent=2) + "\n", encoding="utf-8"
    )


# --------------------------------------------------------------- UD English-EWT (conllu)

LEXICON: dict[str, list[str]] = {
    "DET": ["the", "a", "this", "every"],
    "ADJ": ["old", "small", "quiet", "busy", "bright", "cheap"],
    "NOUN": ["dog", "office", "manager", "pizza", "garden", "report", "car", "teacher"],
    "PROPN": ["Anna", "Boston", "Google", "Maria", "Texas"],
    "PRON": ["she", "they", "we", "he", "it"],
    "VERB": ["visited", "cleaned", "liked", "sold", "painted", "found"],
    "AUX": ["will", "can", "should", "did"],
    "VERB_BASE": ["visit", "clean", "like", "sell", "paint", "find"],
    "ADP": ["in", "near", "behind", "at"],
    "ADV": ["quickly", "yesterday", "really", "often"],
    "CCONJ": ["and", "but"],
    "SCONJ": ["because", "although", "if"],
    "NUM": ["two", "three", "5", "12"],
    "INTJ": ["oh", "well", "yes", "wow"],
    "SYM": ["$", "%"],
    "X": ["etc.", "e.g."],
}


def noun_phrase(rng: random.Random) -> list[tuple[str, str]]:
    kind = rng.random()
    if kind < 0.25:
        return [(rng.choice(LEXICON["PROPN"]), "PROPN")]
    if kind < 0.4:
        return [(rng.choice(LEXICON["NUM"]), "NUM"), (rng.choice(LEXICON["NOUN"]) + "s", "NOUN")]
    np_ = [(rng.choice(LEXICON["DET"]), "DET")]
    if rng.random() < 0.5:
        np_.append((rng.choice(LEXICON["ADJ"]), "ADJ"))
    return np_ + [(rng.choice(LEXICON["NOUN"]), "NOUN")]


def clause(rng: random.Random) -> list[tuple[str, str]]:
    subject = [(rng.choice(LEXICON["PRON"]), "PRON")] if rng.random() < 0.4 else noun_phrase(rng)
    if rng.random() < 0.3:
        verb = [(rng.choice(LEXICON["AUX"]), "AUX")]
        if rng.random() < 0.4:
            verb.append(("not", "PART"))
        verb.append((rng.choice(LEXICON["VERB_BASE"]), "VERB"))
    else:
        verb = [(rng.choice(LEXICON["VERB"]), "VERB")]
    words = subject + verb + noun_phrase(rng)
    if rng.random() < 0.4:
        words += [(rng.choice(LEXICON["ADP"]), "ADP")] + noun_phrase(rng)
    if rng.random() < 0.3:
        words.append((rng.choice(LEXICON["ADV"]), "ADV"))
    return words


def ewt_sentence(rng: random.Random, i: int) -> list[tuple[str, str]]:
    """One tagged sentence; some are built to hold the rarer tags (INTJ, SYM, X, PART)."""
    if i % 10 == 0:
        return [
            (rng.choice(LEXICON["INTJ"]).capitalize(), "INTJ"),
            (",", "PUNCT"),
            (rng.choice(LEXICON["PRON"]), "PRON"),
            ("paid", "VERB"),
            ("$", "SYM"),
            (rng.choice(LEXICON["NUM"][2:]), "NUM"),
            ("for", "ADP"),
            (rng.choice(LEXICON["NOUN"]) + "s", "NOUN"),
            (",", "PUNCT"),
            (rng.choice(LEXICON["NOUN"]) + "s", "NOUN"),
            ("etc.", "X"),
        ]
    if i % 20 == 3:  # "cannot" is one surface token but two words: a multi-word token
        words = [
            (rng.choice(LEXICON["PRON"]), "PRON"),
            ("can", "AUX"),
            ("not", "PART"),
            (rng.choice(LEXICON["VERB_BASE"]), "VERB"),
        ] + noun_phrase(rng)
    else:
        words = clause(rng)
        join = rng.random()
        if join < 0.25:
            words += [(",", "PUNCT"), (rng.choice(LEXICON["CCONJ"]), "CCONJ")] + clause(rng)
        elif join < 0.45:
            words += [(rng.choice(LEXICON["SCONJ"]), "SCONJ")] + clause(rng)
    words.append((rng.choice([".", ".", "!"]), "PUNCT"))
    words[0] = (words[0][0][0].upper() + words[0][0][1:], words[0][1])
    return words


def conllu_block(sent_id: str, words: list[tuple[str, str]], with_empty_node: bool) -> str:
    """Format one sentence; the head of every word is the first verb (a flat, valid tree).

    Like real EWT files, some sentences hold lines that loaders must skip: a multi-word
    token range ("2-3 cannot" over the words "can" + "not") and, when ``with_empty_node``,
    an empty node ("4.1").
    """
    root = next(i for i, (_, tag) in enumerate(words, 1) if tag == "VERB")
    mwt = next(
        (
            i
            for i in range(1, len(words))
            if words[i - 1 : i + 1] == [("can", "AUX"), ("not", "PART")]
        ),
        None,
    )
    lines, text = [], ""
    for i, (form, tag) in enumerate(words, 1):
        nxt = words[i][0] if i < len(words) else None
        glued = nxt in {",", ".", "!"} or i == mwt  # no space before punctuation / inside "cannot"
        if i == mwt:
            lines.append(f"{i}-{i + 1}\tcannot\t_\t_\t_\t_\t_\t_\t_\t_")
        head, rel = (0, "root") if i == root else (root, "dep")
        misc = "SpaceAfter=No" if glued and i != mwt and nxt is not None else "_"
        lines.append(f"{i}\t{form}\t{form.lower()}\t{tag}\t_\t_\t{head}\t{rel}\t_\t{misc}")
        if with_empty_node and i == root:
            lines.append(f"{i}.1\t{form}\t{form.lower()}\t{tag}\t_\t_\t_\t_\t{root}:conj\t_")
        text += form + ("" if glued or nxt is None else " ")
    return "\n".join([f"# sent_id = {sent_id}", f"# text = {text}", *lines]) + "\n\n"


def write_ewt(rng: random.Random) -> None:
    out = HERE / "ud_english_ewt"
    out.mkdir(exist_ok=True)
    for split, n in [("train", 300), ("dev", 60), ("test", 60)]:
        blocks, tags = [], set()
        for i in range(n):
            words = ewt_sentence(rng, i)
            tags.update(tag for _, tag in words)
            sent_id = f"sample-{split}-{i + 1:04d}"
            blocks.append(conllu_block(sent_id, words, with_empty_node=i % 20 == 7))
        assert len(tags) == 17, f"{split} covers only {sorted(tags)}"
        (out / SAMPLE_NAMES[f"en_ewt-ud-{split}.conllu"]).write_text(
            "".join(blocks), encoding="utf-8"
        )


def main() -> None:
    # One generator per dataset, so changing one never reshuffles the others.
    write_sst2(random.Random(SEED))
    write_clinc150(random.Random(SEED + 1))
    write_ewt(random.Random(SEED + 2))
    total = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file())
    print(f"wrote samples under {HERE} ({total / 1024:.0f} KiB in all)")


if __name__ == "__main__":
    main()
