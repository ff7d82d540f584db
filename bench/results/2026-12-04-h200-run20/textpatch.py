"""The substitution every run-20 text transform is made of: a regular expression that must match (at least once, or as
often as asked), its replacements counted."""
import re


class Patch:
    def __init__(self, who: str, text: str):
        self.who, self.text, self.count = who, text, 0

    def sub(self, pattern: str, repl, count: int = 0) -> None:
        self.text, k = re.subn(pattern, repl, self.text, count=count, flags=re.M)
        if not k:
            raise ValueError(f"{self.who}: {pattern!r} not found")
        self.count += k

    def result(self) -> tuple[str, int]:
        return self.text, self.count
