"""Writes the two small real datasets of Gefen's quality tests (tstGefenQuality.cpp) from the
copies scikit-learn ships with its package (no download):

  digits.txt    the 1797 8x8 handwritten digits (UCI optdigits test set as bundled by
                scikit-learn): one line per image, 64 pixel values 0..16 written as one character
                each ("0".."9", "a".."g" for 10..16), a space, the label 0..9.
  diabetes.txt  the 442 diabetes patients (Efron et al. 2004): one line per patient, the 10
                raw (unscaled) features, then the disease-progression target, space separated.

Usage: python3 -m pip install scikit-learn && python3 extract_sklearn_datasets.py
"""
import os

from sklearn.datasets import load_diabetes, load_digits

here = os.path.dirname(os.path.abspath(__file__))
alphabet = "0123456789abcdefg"

digits = load_digits()
with open(os.path.join(here, "digits.txt"), "w") as f:
    f.write("# sklearn.datasets.load_digits(): 1797 images, 64 pixels (0..16) as one character each, label\n")
    for x, y in zip(digits.data.astype(int), digits.target):
        f.write("".join(alphabet[v] for v in x) + " " + str(int(y)) + "\n")

diabetes = load_diabetes(scaled=False)
with open(os.path.join(here, "diabetes.txt"), "w") as f:
    f.write("# sklearn.datasets.load_diabetes(scaled=False): 442 rows, 10 raw features, target\n")
    for x, y in zip(diabetes.data, diabetes.target):
        f.write(" ".join("%.6g" % v for v in x) + " " + "%.6g" % y + "\n")
