"""A control server with a stand-in agent that answers status (for the control-channel tests)."""
import os, sys, time
from gpucheckup.capture.agent import server


class Agent:
    def handle(self, req):
        yield {"ok": True, "pid": os.getpid()}

    def log(self, msg):
        pass

    def error(self, where, exc=None):
        pass


server.start(Agent())
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
