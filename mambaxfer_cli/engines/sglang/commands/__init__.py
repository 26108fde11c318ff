"""What the commands answer under ``--engine sglang``: the options SGLang's rules read and
refuse, the runs and the reports."""
