"""The models: the thesis' dual encoder, the generator (the teacher),
ReAtt's attention retriever, and what they share."""
