"""A distillation teacher named by its parts and their weights (the setting ``teacher``):
``bm25+student``, ``2*bm25+student+gen``, ``0*miners+ce``.

    parse_teacher('2*bm25+student')   # {'bm25': 2.0, 'student': 1.0}
"""


def parse_teacher(spec: str) -> dict[str, float]:
    """A teacher named by its parts and their weights: ``bm25+student`` (1:1),
    ``2*bm25+student``, ``bm25+student+gen``, ``0*miners+ce`` (first stages weighted 0 only
    choose the candidates the re-rankers score). The parts are :data:`TEACHER_PARTS`."""
    weights = {}
    for term in spec.split('+'):
        weight, _, part = term.strip().rpartition('*')
        if part not in TEACHER_PARTS or part in weights:
            raise ValueError(f'teacher {spec!r}: {part!r} is not one of {", ".join(TEACHER_PARTS)} '
                             f'(or is named twice); e.g. bm25+student or 2*bm25+student+gen')
        weights[part] = float(weight) if weight else 1.0
    return weights


# bm25; student: as it is at each round; miners: the setting miners' dense retrievers;
# gen: the generator's query likelihood on the fused top rerank_depth; ce: a cross-encoder;
# fused: BM25 and MiniLM fused, as a re-ranker (the cross-encoder's stand-in)
TEACHER_PARTS = ('bm25', 'student', 'miners', 'gen', 'ce', 'fused')
# the parts that score every candidate a student learns from (the others re-rank the top 10)
LABELLING_PARTS = ('ce', 'fused')
RERANKING_PARTS = ('gen', 'ce', 'fused')


def mines_only(spec: str) -> bool:
    """Whether the teacher ``spec``'s first stages only choose the candidates: each weighted 0,
    and a re-ranker named to score them (``0*miners+ce``)."""
    weights = parse_teacher(spec)
    stages = [w for part, w in weights.items() if part not in RERANKING_PARTS]
    return len(stages) < len(weights) and not any(stages)
