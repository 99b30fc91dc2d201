"""POSG (part-of-speech guided softmax): the tag head, its fitting and its output layer."""
