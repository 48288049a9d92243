#!/usr/bin/env python3
"""Fits the polynomial of tensor/vector_math.h's NormalTail.

Phi(-a) = exp(-a^2/2) * H(a) for a >= 0, and H is smooth in t = 1/(1 + 0.4a),
so a degree-9 polynomial in t fits it on [0, 14] to 7.5e-8 relative. The fit
is least squares on the relative error, reweighted (Lawson) toward minimax.
Reference values come from mpmath at 30 digits. Prints the coefficients,
highest degree first, in the order of the Horner steps in the header.
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 30
P = 0.4
DEGREE = 9


def h_exact(a):
    return float(0.5 * mp.erfc(a / mp.sqrt(2)) * mp.exp(a * a / 2))


def main():
    a = np.concatenate([np.linspace(0, 14, 8000), np.linspace(0, 3, 3000)])
    h = np.array([h_exact(v) for v in a])
    t = 1 / (1 + P * a)
    basis = np.vander(t, DEGREE + 1, increasing=True)
    weight = 1 / h
    coef, *_ = np.linalg.lstsq(basis * weight[:, None], h * weight, rcond=None)
    for _ in range(40):
        rel = (basis @ coef - h) / h
        weight = weight * np.sqrt(np.abs(rel) / np.abs(rel).max() + 1e-3)
        coef, *_ = np.linalg.lstsq(basis * weight[:, None], h * weight,
                                   rcond=None)
    print("max relative error %.3e" % np.abs((basis @ coef - h) / h).max())
    for c in coef[::-1]:
        print("%.9e" % c)


if __name__ == "__main__":
    main()
