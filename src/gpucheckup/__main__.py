from gpucheckup.cli import entry

entry()
