"""A model call opened on the request's targets and keys in turn, and a cut stream continued
on the next target."""
