"""Finding things by name: the one registration rule, did-you-mean hints, lazy package exports."""
