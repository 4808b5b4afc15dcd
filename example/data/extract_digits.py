"""Writes digits.txt, the UCI optical handwritten digits that koptim_digits trains on, from the copy
scikit-learn ships inside its package (no download):

  1797 images of 8x8 pixels with values 0..16, one line per image: 64 characters "0".."9",
  "a".."g" (10..16), a space, the label 0..9. The first line is a comment.

Usage (a developer-time tool; the examples read only digits.txt):
  python3 -m pip install scikit-learn && python3 extract_digits.py
"""
import os

from sklearn.datasets import load_digits

alphabet = "0123456789abcdefg"
digits = load_digits()
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.txt")
with open(path, "w") as f:
    f.write("# sklearn.datasets.load_digits(): 1797 images, 64 pixels (0..16) as one character each, label\n")
    for x, y in zip(digits.data.astype(int), digits.target):
        f.write("".join(alphabet[v] for v in x) + " " + str(int(y)) + "\n")
print("wrote", path, len(digits.target), "images")
