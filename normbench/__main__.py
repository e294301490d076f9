from normbench.cli import app

app(prog_name="normbench")
