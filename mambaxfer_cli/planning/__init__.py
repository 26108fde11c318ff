"""The planning core: model parameters in, frozen values out. Pure: no I/O, torch or NIXL."""
