"""The in-context examples of the SeaKR paper, appendix C.4 (Figures 4-7), as data.

Each sentence of an answer is one step (the prompt builder replaces periods inside a step).
Corrections of the PDF text extraction, all evident from the figures:
- 2Wiki, last example: the fragment "The mother of Grand Duke Alexei Alexandrovich of" leaked from
  the previous example into the first step; removed.
- HotpotQA "Vertical Limit" example: the extraction rendered the quoted title as *The Right Stuff*
  (italics markers); written with quotes as in the same example of Figure 4.
- HotpotQA "Entourage" example: the question lost its last words "last name?" at a line end;
  restored from the same example in Figure 4.
- Simple QA "The Border Surrender" example: a line break split "Mark Austin"; joined.
- 2Wiki "Hypocrite" example: bold markers around "Answer:" dropped.
The official code's lists differ in a few words (e.g. "Do director of film Coolie No. 1 ..."):
`prompts.demos: official` reads them from a clone of its repository (official.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Demo:
    question: str
    steps: tuple[str, ...]
    answer: str


def _d(question: str, steps: list[str], answer: str) -> Demo:
    return Demo(question, tuple(steps), answer)


SIMPLE_QA = (  # Figure 4
    _d("Nobody Loves You was written by John Lennon and released on what album that was issued by Apple Records, and "
       "was written, recorded, and released during his 18 month separation from Yoko Ono?",
       ["The album issued by Apple Records, and written, recorded, and released during John "
        "Lennon's 18 month separation from Yoko Ono is Walls and Bridges.",
        "Nobody Loves You was written by John Lennon on Walls and Bridges album."],
       "Walls and Bridges"),
    _d("What is known as the Kingdom and has National Route 13 stretching towards its border?",
       ["Cambodia is officially known as the Kingdom of Cambodia.",
        "National Route 13 stretches towards the border to Cambodia."],
       "Cambodia"),
    _d("Jeremy Theobald and Christopher Nolan share what profession?",
       ["Jeremy Theobald is an actor and producer.",
        "Christopher Nolan is a director, producer, and screenwriter.",
        "Therefore, they both share the profession of being a producer."],
       "producer"),
    _d("What film directed by Brian Patrick Butler was inspired by a film directed by F.W. Murnau?",
       ["Brian Patrick Butler directed the film The Phantom Hour.",
        "The Phantom Hour was inspired by the films such as Nosferatu and The Cabinet of Dr. Caligari.",
        "Of these, Nosferatu was directed by F.W. Murnau."],
       "The Phantom Hour"),
    _d("Vertical Limit stars which actor who also played astronaut Alan Shepard in 'The Right Stuff'?",
       ["The actor who played astronaut Alan Shepard in 'The Right Stuff' is Scott Glenn.",
        "The movie Vertical Limit also starred Scott Glenn."],
       "Scott Glenn"),
    _d("Which car, produced by Ferrari from 1962 to 1964 for homologation into the FIA's Group 3 "
       "Grand Touring Car category inspired the Vandenbrink GTO?",
       ["The car produced by Ferrari from 1962 to 1964 for homologation into the FIA's Group 3 Grand "
        "Touring Car category is the Ferrari 250 GTO.",
        "The Ferrari 250 GTO also inspired the Vandenbrink GTO's styling."],
       "Ferrari 250 GTO"),
    _d("The actor that stars as Joe Proctor on the series 'Power' also played a character on "
       "'Entourage' that has what last name?",
       ["The actor that stars as Joe Proctor on the series 'Power' is Jerry Ferrara.",
        "Jerry Ferrara also played a character on Entourage named Turtle Assante.",
        "Thus, Turtle Assante's last name is Assante."],
       "Assante"),
    _d("In which country did this Australian who was detained in Guantanamo Bay detention camp and "
       "published 'Guantanamo: My Journey' receive para-military training?",
       ["The Australian who was detained in Guantanamo Bay detention camp and published "
        "'Guantanamo: My Journey' is David Hicks.",
        "David Hicks received his para-military training in Afghanistan."],
       "Afghanistan"),
    _d("Does The Border Surrender or Unsane have more members?",
       ["The Border Surrender band has following members: Keith Austin, Simon Shields, Johnny "
        "Manning and Mark Austin.",
        "That is, it has 4 members.",
        "Unsane is a trio of 3 members.",
        "Thus, The Border Surrender has more members."],
       "The Border Surrender"),
)

TWOWIKI = (  # Figure 5
    _d("Who was born first out of Martin Hodge and Ivania Martinich?",
       ["Martin Hodge was born on 4 February 1959.",
        "Ivania Martinich was born on 25 July 1995.",
        "Thus, 4 February 1959 is earlier than 25 July 1995 and Martin Hodge was born first."],
       "Martin Hodge"),
    _d("When did the director of film Hypocrite (Film) die?",
       ["The film Hypocrite was directed by Miguel Morayta.",
        "Miguel Morayta died on 19 June 2013."],
       "19 June 2013"),
    _d("Are both Kurram Garhi and Trojkrsti located in the same country?",
       ["Kurram Garhi is located in the country of Pakistan.",
        "Trojkrsti is located in the country of Republic of Macedonia.",
        "Thus, they are not in the same country."],
       "no"),
    _d("Do the director of film Coolie No. 1 (1995 Film) and the director of film The Sensational "
       "Trial have the same nationality?",
       ["Coolie No. 1 (1995 film) was directed by David Dhawan.",
        "The Sensational Trial was directed by Karl Freund.",
        "David Dhawan's nationality is Indian.",
        "Karl Freund's nationality is German.",
        "Thus, they do not have the same nationality."],
       "no"),
    _d("Who is Boraqchin (Wife Of Ögedei)'s father-in-law?",
       ["Boraqchin is married to Ögedei Khan.",
        "Ögedei Khan's father is Genghis Khan.",
        "Thus, Boraqchin's father-in-law is Genghis Khan."],
       "Genghis Khan"),
    _d("When did the director of film Laughter In Hell die?",
       ["The film Laughter In Hell was directed by Edward L. Cahn.",
        "Edward L. Cahn died on August 25, 1963."],
       "August 25, 1963"),
    _d("Who is the grandchild of Krishna Shah (Nepalese Royal)?",
       ["Krishna Shah has a child named Rudra Shah.",
        "Rudra Shah has a child named Prithvipati Shah.",
        "Thus, Krishna Shah has a grandchild named Prithvipati Shah."],
       "Prithvipati Shah"),
    _d("Where did the director of film Maddalena (1954 Film) die?",
       ["The film Maddalena is directed by Augusto Genina.",
        "Augusto Genina died in Rome."],
       "Rome"),
    _d("What is the cause of death of Grand Duke Alexei Alexandrovich Of Russia's mother?",
       ["The mother of Grand Duke Alexei Alexandrovich of Russia is Maria Alexandrovna.",
        "Maria Alexandrovna died from tuberculosis."],
       "tuberculosis"),
    _d("Which film has the director died later, The Gal Who Took the West or Twenty Plus Two?",
       # The PDF text has "The mother of Grand Duke Alexei Alexandrovich of" leaked in front of
       # this first step (an extraction glitch); it is not part of the example.
       ["The film Twenty Plus Two was directed by Joseph M. Newman.",
        "The Gal Who Took the West was directed by Frederick de Cordova.",
        "Joseph M. Newman died on January 23, 2006.",
        "Fred de Cordova died on September 15, 2001.",
        "Thus, January 23, 2006 is later than September 15, 2001, and the person to die later from "
        "the two is Twenty Plus Two."],
       "Twenty Plus Two"),
)

HOTPOTQA = (  # Figure 6
    SIMPLE_QA[2],  # Jeremy Theobald / Christopher Nolan (identical text in Figures 4 and 6)
    SIMPLE_QA[3],  # Brian Patrick Butler
    _d("How many episodes were in the South Korean television series in which Ryu Hye-young played Bo-ra?",
       ["The South Korean television series in which Ryu Hye-young played Bo-ra is Reply 1988.",
        "The number of episodes Reply 1988 has is 20."],
       "20"),
    _d("Were Lonny and Allure both founded in the 1990s?",
       ["Lonny (magazine) was founded in 2009.",
        "Allure (magazine) was founded in 1991.",
        "Thus, of the two, only Allure was founded in the 1990s."],
       "no"),
    _d("Vertical Limit stars which actor who also played astronaut Alan Shepard in The Right Stuff?",
       ["The actor who played astronaut Alan Shepard in 'The Right Stuff' is Scott Glenn.",
        "The movie Vertical Limit also starred Scott Glenn."],
       "Scott Glenn"),
    _d("What was the 2014 population of the city where Lake Wales Medical Center is located?",
       ["Lake Wales Medical Center is located in the city of Lake Wales, Polk County, Florida.",
        "The population of Lake Wales in 2014 was 15,140."],
       "15,140"),
    _d("Who was born first? Jan de Bont or Raoul Walsh?",
       ["Jan de Bont was born on 22 October 1943.",
        "Raoul Walsh was born on March 11, 1887.",
        "Thus, Raoul Walsh was born first."],
       "Raoul Walsh"),
    _d("In what country was Lost Gravity manufactured?",
       ["The Lost Gravity (roller coaster) was manufactured by Mack Rides.",
        "Mack Rides is a German company."],
       "Germany"),
    _d("Which of the following had a debut album entitled 'We Have an Emergency': Hot Hot Heat or The Operation M D?",
       ["The debut album of the band 'Hot Hot Heat' was 'Make Up the Breakdown'.",
        "The debut album of the band 'The Operation M.D.' was 'We Have an Emergency'."],
       "The Operation M.D."),
    _d("How many awards did the 'A Girl Like Me' singer win at the American Music Awards of 2012?",
       ["The singer of 'A Girl Like Me' is Rihanna.",
        "In the American Music Awards of 2012, Rihanna won one award."],
       "one"),
    SIMPLE_QA[6],  # Entourage / Assante
)

IIRC = (  # Figure 7
    _d("What is the age difference between the kicker and the quarterback for the Chargers?",
       ["The kicker for the Chargers is Nate Kaeding.",
        "The quarterback (QB) for the Chargers is Philip Rivers.",
        "Nate Kaeding was born in the year 1982.",
        "Philip Rivers was born in the year 1981.",
        "Thus, the age difference between them is of 1 year."],
       "1"),
    _d("How many years was the ship that took the battalion from New South Wales to Ceylon in service?",
       ["The ship that took the battalion from New South Wales to Ceylon is General Hewitt.",
        "General Hewitt was launched in Calcutta in 1811.",
        "General Hewitt was sold for a hulk or to be broken up in 1864.",
        "So she served for a total of 1864 - 1811 = 53 years."],
       "53"),
    _d("What year was the theatre that held the 2016 NFL Draft built?",
       ["The theatre that held the 2016 NFL Draft is Auditorium Theatre.",
        "The Auditorium Theatre was built in 1889."],
       "1889"),
    _d("How long had Milan been established by the year that Nava returned there as a reserve in "
       "the first team's defense?",
       ["Nava returned to Milan as a reserve in the first team's defense in the year 1990.",
        "Milan had been established in the year 1899.",
        "Thus, Milan had been established for 1990 - 1899 = 91 years when Nava returned to Milan "
        "as a reserve in the first team's defense."],
       "91"),
    _d("When was the town Scott was born in founded?",
       ["Scott was born in the town of Cooksville, Illinois.",
        "Cooksville was founded in the year 1882."],
       "1882"),
    _d("In what country did Wright leave the French privateers?",
       ["Wright left the French privateers in Bluefield's river.",
        "Bluefields is the capital of the South Caribbean Autonomous Region (RAAS) in the country of Nicaragua."],
       "Nicaragua"),
    _d("Who plays the A-Team character that Dr. Hibbert fashioned his hair after?",
       ["Dr. Hibbert fashioned his hair after Mr. T from The A-Team.",
        "Mr. T's birthname is Lawrence Tureaud."],
       "Lawrence Tureaud"),
    _d("How many people attended the conference held near Berlin in January 1942?",
       ["The conference held near Berlin in January 1942 is the Wannsee Conference.",
        "The Wannsee Conference was attended by 15 people."],
       "15"),
    _d("When did the country Ottwalt went into exile in founded?",
       ["Ottwalt went into exile in the country of Denmark.",
        "Denmark has been inhabited since around 12,500 BC."],
       "12,500 BC"),
    _d("When was the J2 club Uki played for in 2001 founded?",
       ["The J2 club that Uki played for is Montedio Yamagata.",
        "Montedio Yamagata was founded in 1984."],
       "1984"),
)
