"""Sparsemax (Martins and Astudillo, 2016): the operator and its output layer."""
