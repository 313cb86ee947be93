package nonconst

// micro is what a hand edit put in place of a constant.
var micro = 1
