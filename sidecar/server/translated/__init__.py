"""A request answered by a provider of another protocol: the whole answer and the live
stream translated (over ``translation/``)."""
