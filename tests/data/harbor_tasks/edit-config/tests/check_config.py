import configparser
import sys

config = configparser.ConfigParser()
if not config.read("/app/service.ini"):
    sys.exit("service.ini is missing")
service = config["service"]
expected = {"name": "inventory", "debug": "false", "port": "8080", "workers": "4"}
actual = dict(service)
print(actual)
sys.exit(0 if actual == expected else 1)
