"""What every lesson uses: models, data, state utilities, checks, figure style, stored results."""
