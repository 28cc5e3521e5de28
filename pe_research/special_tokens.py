"""Token ids every vocabulary reserves: padding, begin and end of the target sequence."""

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")
