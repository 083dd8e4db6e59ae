# Models trained by the pipeline (issue 4): tokenizer, one-factor variants, Gram panels,
# length generalization. Placeholder until the training stage lands.


def train_targets():
    return []
