"""What the commands run under ``--engine vllm`` beyond the plan (bench's planned and measured steps)."""
