"""A toy bridge corpus shared by the confidence-loop tests: the Leland passage names the film, the film's passage
names its director."""

QUERY = "Who directed the film that was shot in Leland in 1986?"
PASSAGES = [
    (
        "Leland, North Carolina",
        "Leland is a town in Brunswick County. The film Maximum Overdrive was shot in Leland in 1986.",
    ),
    ("Maximum Overdrive", "Maximum Overdrive is a 1986 horror film directed by Stephen King."),
    ("Stephen King", "Stephen King is an American author of horror novels."),
    ("Brunswick County", "Brunswick County is a county in North Carolina."),
]
