"""KerBS (Kernelized Bayesian Softmax): the head, its fitting and its output layer."""
