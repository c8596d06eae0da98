// The web app's own behaviour against a fake berth (lib/ui_checks.mjs): each test has its
// own browser context and answers the app's API calls itself.
import { test } from '@playwright/test';

import { BASE, phone, SHOTS } from '../lib/env.mjs';
import { longHistoryIsPaged, oneScreenPerNavigation, streamedAnswerRendersOnlyTheTail, tabsAndFocus } from '../lib/ui_checks.mjs';

const note = (info, text) => info.annotations.push({ type: 'note', description: text });

test('a hash change during the session check mounts one screen', async ({ browser }, info) => {
  note(info, await oneScreenPerNavigation(browser, BASE, phone));
});

test('a streamed answer re-renders only its unfinished paragraph, aria-busy meanwhile', async ({ browser }, info) => {
  note(info, await streamedAnswerRendersOnlyTheTail(browser, BASE, phone));
});

test('a long history is paged, not all in the DOM', async ({ browser }, info) => {
  note(info, await longHistoryIsPaged(browser, BASE, phone, SHOTS));
});

test('tabs take the arrow keys; a navigation moves the focus', async ({ browser }, info) => {
  note(info, await tabsAndFocus(browser, BASE, phone));
});
