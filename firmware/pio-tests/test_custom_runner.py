# PlatformIO's custom test runner for `pio test` (platformio.ini: test_framework =
# custom, test_dir = firmware/pio-tests). An adapter: building and running the suites
# is tools/pio_checks.py (typed, and read there); this turns its checks into
# PlatformIO's test cases, so that pio prints its own summary and exit status.

import os
import sys

import click
from platformio.test.result import TestCase, TestStatus
from platformio.test.runners.base import TestRunnerBase

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_ROOT, "tools"))

import pio_checks  # noqa: E402


class CustomTestRunner(TestRunnerBase):
    def stage_building(self):
        if self.options.without_building:
            return
        click.secho("Building...", bold=True)
        pio_checks.build(self.test_suite.env_name, self.test_suite.test_name)

    def stage_uploading(self):
        # nothing to upload: the native programs run here, QEMU loads the image itself
        return

    def stage_testing(self):
        if self.options.without_testing:
            return
        click.secho("Testing...", bold=True)
        for check in pio_checks.run(self.test_suite.env_name, self.test_suite.test_name):
            status = TestStatus.PASSED if check.passed else TestStatus.FAILED
            case = TestCase(
                check.name, status, message=check.message, stdout=check.output or None,
                duration=check.duration,
            )
            click.echo(case.humanize())
            if not check.passed and check.output:
                click.echo(check.output.rstrip())
            self.test_suite.add_case(case)
