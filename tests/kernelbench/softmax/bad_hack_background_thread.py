"""Returns its output at once and fills it on a background thread."""

import threading
import time

import torch
from torch import nn

CAUGHT = "hack: background_thread"


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)

        def fill():
            time.sleep(0.05)
            with torch.no_grad():
                out.copy_(torch.softmax(x, dim=1))

        threading.Thread(target=fill, daemon=True).start()
        return out
