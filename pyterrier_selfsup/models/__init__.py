"""The models: the thesis' dual encoder, the generator (the teacher), ReAtt's attention retriever,
and what they share. Importing any of them installs the hub's offline notices' filters
(:mod:`~pyterrier_selfsup.models.hub`)."""
from pyterrier_selfsup.models import hub  # noqa: F401
