*** Settings ***
Documentation     A provisioned board boots, says HELLO with its identity and offer, and
...               completes the handshake with the host.
...               Renode:  renode-test renode/boot.robot --variable BOARD:hifive1
...               QEMU:    .venv/bin/python -m robot --variable BACKEND:qemu --variable BOARD:hifive1 renode/boot.robot
Resource          keywords/${BACKEND}.resource
Suite Setup       Start Backend
Suite Teardown    Stop Backend
Test Setup        Boot Board    ${BOARD}
Test Teardown     Shut Down Board


*** Variables ***
${BACKEND}        renode
${BOARD}          mps2-an385


*** Test Cases ***
Board Says Hello With Its Identity
    Expect Hello

Handshake Completes And The Board Answers
    Handshake
    Expect Status    captures=0    frames_bad=0
    Expect No Frame Errors
