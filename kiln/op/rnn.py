"""rnn operators."""
