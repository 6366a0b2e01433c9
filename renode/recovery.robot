*** Settings ***
Documentation     Garbage and corrupted frames on the line are counted and dropped; the
...               session goes on.
Resource          keywords/${BACKEND}.resource
Suite Setup       Start Backend
Suite Teardown    Stop Backend
Test Setup        Boot And Handshake
Test Teardown     Shut Down Board


*** Variables ***
${BACKEND}        renode
${BOARD}          mps2-an385


*** Test Cases ***
Garbage Is Counted And The Session Goes On
    Send Frame    de ad be ef 00
    Send Capture    temp/0    {"t":21.5}    0x0FFF    0x10000    0xE666
    Expect Verdict    GREEN
    Expect Status    frames_bad=1    captures=1

A Corrupted Frame Is Dropped, Not Answered
    ${bad}=    Corrupted Capture Frame
    Send Frame    ${bad}
    Send Capture    temp/0    {"t":21.5}    0x0FFF    0x10000    0xE666
    Expect Verdict    GREEN
    Expect Status    frames_bad=1    captures=1
    Expect No Frame Errors


*** Keywords ***
Boot And Handshake
    Boot Board    ${BOARD}
    Handshake
